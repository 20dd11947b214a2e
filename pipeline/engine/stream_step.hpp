#pragma once
// One image of tiler.mode stream (docs/streaming.md): the encoder's trunk runs over
// the whole image tile by tile (net::StreamingTrunk, each tile read with its halo
// through a RegionReader), giving the untiled network's feature map [1, C, h, w];
// the aggregator pools the map's cells (each cell an instance: mean is global average
// pooling, attention is StreamingCLAM's head), the head classifies. Training then
// backpropagates head and aggregator to dL/dmap and the trunk recomputes each tile
// to add exactly the whole image's parameter gradients. Memory: one streaming tile's
// activations, the map and its gradient.
//
// BatchNorm must be frozen (running statistics) and dropout inside the trunk off; a
// trunk layer that cannot be streamed is refused when the step is made, named.
#include <cstdint>
#include <optional>

#include "net/streaming.hpp"
#include "pipeline/engine/two_pass.hpp"

namespace bigtrain {

struct StreamStepOptions {
  Backend backend = Backend::cpu;
  std::int64_t tile = 256;  // tiler.tile: pixels per streaming tile side (rounded down to the trunk's stride)
  bool freeze_bn = true;    // train.freeze_bn: must be true to train
  float label_smoothing = 0.0f;
  DType encoder_compute_dtype = DType::f32;  // train.precision, the trunk's convolutions
};

class StreamStep {
 public:
  // `training` false makes an inference-only step (BatchNorm uses running statistics
  // there whatever freeze_bn says). Throws Error naming the first layer of the trunk
  // that cannot be streamed in the context the step will run.
  StreamStep(const ImageModel& model, const StreamStepOptions& options, bool training = true);

  // Forward, head, loss and the backward of every parameter; the loss gradient is
  // multiplied by loss_scale (as TwoPassStep::finish_image). `tiles` of the outcome
  // is the streaming tiles of the image.
  ImageOutcome train_image(net::RegionReader& image, int label, std::uint64_t dropout_seed, float loss_scale);
  // Forward only; keeps the feature map for cell_features().
  ImageOutcome eval_image(net::RegionReader& image, int label);

  // The tiles of an image of this shape (the trunk's geometry for `tile`).
  net::StreamPlan plan(const Shape& image) const;
  // Of the last image: its plan, and (eval_image) the map's cells [h*w, C] and the
  // aggregator's attention over them (undefined for mean and max).
  const net::StreamPlan& last_plan() const { return plan_; }
  const Tensor& cell_features() const { return cells_; }
  const Tensor& attention() const { return model_.aggregator->attention(); }
  void end_image() { cells_ = Tensor(); }

 private:
  net::ForwardContext trunk_context() const;
  ImageOutcome head(const Tensor& map, int label, bool training, std::uint64_t dropout_seed, float loss_scale,
                    Tensor* dmap);

  ImageModel model_;
  StreamStepOptions options_;
  bool training_ = true;
  net::StreamingTrunk trunk_;
  net::StreamPlan plan_;
  Tensor cells_;
};

}  // namespace bigtrain
