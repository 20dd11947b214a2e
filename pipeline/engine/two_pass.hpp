#pragma once
// One image of tiled end-to-end training in two passes (docs/design.md, section 4):
//
//   begin_image(N, label)            H = zeros [N, D] (host), nothing else held
//   pass1_batch(x, first) ...        encoder forward, no activations kept; rows of H
//   finish_image(loss_scale)         z = Agg(H), logits = fc(z), loss; backward gives
//                                    aggregator/head gradients and dL/dH
//   pass2_batch(x, first) ...        same batches again: forward keeping activations
//                                    (BatchNorm with the same batch statistics, running
//                                    statistics not moved twice), backward with the
//                                    batch's rows of dL/dH, encoder gradients accumulate
//
// Pass 2 must be fed exactly the tensors pass 1 saw, in the same batches, last batch
// first; the tile stream guarantees that by recomputing the same reads and seeded
// augmentation (StreamJob::reverse_batches).
// Memory: one batch's activations plus H and dL/dH (N x D floats each).
//
// Recompute only what memory demands (train.memory_budget): begin_image's kept_tiles
// makes pass 1 keep the activations of the image's first batches (each layer's saved
// stack holds them, net/layer.hpp), pass 2 recomputes only the others, and
// backward_kept() backpropagates the kept ones, last first, after pass 2's last
// batch. Pass 2 runs last batch first either way, so the parameter gradients are
// summed in one order and are bit-identical whichever batches were kept (the kept
// batches' pass 1 is the training-shaped forward pass 2 would have recomputed; with
// frozen BatchNorm every pass runs convolution and BatchNorm as one op, kept or not:
// TwoPassOptions::fuse_conv_bn). With top_tiles or the instance vote
// nothing is kept (their pass 2 trains a subset, or there is none).
//
// kept_tail_layers keeps less of more batches: of every batch not kept whole, pass 1
// keeps the activations of the encoder's last kept_tail_layers children (from a
// residual block on), and pass 2 recomputes only the children before them, then
// backpropagates the tail from what pass 1 kept and the head from what it just
// recomputed. A network's deep layers hold little memory for their FLOPs (ResNet-50
// on 512-pixel tiles: layer4 is a fifth of the forward's FLOPs in 6% of what a
// batch keeps), so under a budget too small for whole batches the tail still
// saves recomputation. Gradients stay bit-identical (the same per-batch order; the
// tail's pass 1 runs training-shaped, as its recomputation would).
//
// With top_tiles M (aggregator.top_tiles; Iterative Patch Selection, Bergner et al.
// 2023) the head sees only the M tiles the attention ranks highest: finish_image
// scores all N rows of H without gradients, then aggregates, classifies and
// backpropagates through those M alone, and pass 2 runs the encoder on them only
// (batches without a selected tile are skipped), so it costs M tiles instead of N.
// Evaluation selects the same way. Needs frozen BatchNorm (a sub-batch must give a
// tile the features its full batch gave it).
//
// The instance aggregator trains in one pass (single_pass()): every tile is
// classified by the head and trained with the image's label, so a batch's loss and
// gradients need nothing of the other tiles: train_instances_batch does forward and
// backward at once, and finish_image only votes (the image's log-probabilities are
// the mean of its tiles'). Tiles of clutter, seen with every label, learn to predict
// nothing in particular and so drop out of the vote; tiles of an object are pushed
// towards the labels of the images that hold it, which is the object's class
// whenever it is the image's evidence. Each tile's loss gradient arrives at once,
// instead of through a pooling that dilutes it by the tile count.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/core/tensor.hpp"
#include "net/aggregator.hpp"
#include "net/encoder.hpp"
#include "net/linear.hpp"
#include "pipeline/engine/image_outcome.hpp"

namespace bigtrain {

struct ImageModel {
  net::Encoder* encoder = nullptr;
  net::Aggregator* aggregator = nullptr;
  net::Linear* head = nullptr;

  std::vector<net::Parameter*> parameters() const;  // encoder, aggregator, head
  void zero_grad() const;
};

// One image's cross-entropy from its logits [1, classes]: the loss and the
// probabilities (outcome; tiles left 0 for the caller) and the loss's gradient with
// respect to the logits, unscaled, on the backend's device. The two-pass and the
// streamed steps end the same way.
struct ImageLoss {
  ImageOutcome outcome;
  Tensor dlogits;
};
ImageLoss image_loss(Backend backend, const Tensor& logits, int label, float label_smoothing);

struct TwoPassOptions {
  Backend backend = Backend::cpu;
  bool freeze_bn = false;
  float label_smoothing = 0.0f;
  std::uint64_t dropout_seed = 0;  // per image; the aggregator's dropout mask
  // train.precision: the encoder's convolutions compute in this type (f32, bf16,
  // f16); the aggregator and head stay float32 (see net::ForwardContext).
  DType encoder_compute_dtype = DType::f32;
  // aggregator.top_tiles: 0 aggregates every tile; M > 0 the M highest-attention ones.
  std::int64_t top_tiles = 0;
  // train.instance_loss (attention only): the k tiles the attention weighs most are
  // each trained with the image's label through the head, the k it weighs least
  // towards the uniform distribution, the two means halved and added to the image's
  // loss times instance_weight (CLAM's instance loss, Lu et al. 2021, with the image
  // head as the instance classifier). 0: off.
  std::int64_t instance_k = 0;
  float instance_weight = 0.0f;
  // With frozen BatchNorm, both passes run each convolution with its BatchNorm (and
  // ReLU, residual add) as one op (net/conv_bn_fusion.hpp): fewer passes over memory,
  // and pass 2 keeps half the activations. Off: the layers one by one (rounded
  // differently), to measure what it saves.
  bool fuse_conv_bn = true;
  bool fuse_narrow_training_convs = false;  // ForwardContext's: tests' small networks
};

class TwoPassStep {
 public:
  TwoPassStep(const ImageModel& model, const TwoPassOptions& options);

  // kept_tiles: pass 1 keeps the activations of the batches that start below it
  // (whole batches; 0 keeps none, as top_tiles and the instance vote require);
  // kept_tail_layers: of the others, those of the encoder's last children (above).
  void begin_image(std::int64_t tiles, int label, std::uint64_t dropout_seed, std::int64_t kept_tiles = 0,
                   std::size_t kept_tail_layers = 0);
  // x: [B, C, T, T] on the backend's device; rows [first, first + B) of H.
  void pass1_batch(const Tensor& x, std::int64_t first_tile);
  // In place of pass 1's batches: the image's whole H from a frozen encoder, kept
  // from an earlier epoch (feature_cache.hpp); any device.
  void load_features(const Tensor& features);
  // Head, loss and dL/dH; the loss gradient is multiplied by loss_scale (1 /
  // images_per_step, so accumulated gradients are a mean over the step's images,
  // times the fp16 loss scale).
  ImageOutcome finish_image(float loss_scale);
  // A batch pass 1 did not keep, last batch first (see above).
  void pass2_batch(const Tensor& x, std::int64_t first_tile);
  // After pass 2's last batch (or after finish_image when pass 1 kept every batch):
  // backward of the kept batches, last first. Nothing to do when none were kept.
  void backward_kept();
  // Tiles pass 2 must recompute: those of the batches pass 1 did not keep.
  std::int64_t recomputed_tiles() const;

  // aggregator.kind instance: training needs no pass 2; call train_instances_batch
  // for every batch (in place of pass1_batch), then finish_image for the vote.
  // With top_tiles M it takes two: pass 1 scores every tile, finish_image trains the
  // head on the M tiles most likely the label's, and pass 2 their encoder.
  bool single_pass() const { return instance_ && options_.top_tiles == 0; }
  // Forward and backward of the batch's tiles, each with the image's label; the
  // gradient is that of the mean over the image's tiles, times loss_scale.
  void train_instances_batch(const Tensor& x, std::int64_t first_tile, float loss_scale);

  // Evaluation: features only (pass 1 without training), then the head.
  void eval_batch(const Tensor& x, std::int64_t first_tile);
  ImageOutcome finish_eval();

  // Drops H and dL/dH (the next image allocates its own).
  void end_image();

  const Tensor& features() const { return h_; }
  const Tensor& feature_grads() const { return dh_; }
  // Attention weights of the last image over all its tiles (undefined for mean/max;
  // with top_tiles, the scoring pass's, over all N; for the instance vote, each
  // tile's probability of the image's predicted class, normalised to sum 1).
  const Tensor& attention() const {
    return selected_.empty() && !instance_ ? model_.aggregator->attention() : scores_;
  }
  // The rows the head saw with top_tiles (ascending), empty when it saw all.
  const std::vector<std::int64_t>& selected_tiles() const { return selected_; }

 private:
  net::ForwardContext encoder_context(bool keep_activations, bool update_running_stats) const;
  std::size_t tail_begin() const { return model_.encoder->size() - tail_layers_; }
  void store_rows(const Tensor& features, std::int64_t first_tile);
  ImageOutcome head_forward(bool training, float loss_scale);
  ImageOutcome vote();  // the instance aggregator's image outcome from H
  void train_top_instances(float loss_scale);
  // The head's gradient on `features` when every row is a tile labelled with the
  // image's label (mean cross-entropy over the rows, times scale).
  Tensor tiles_as_label_gradient(const Tensor& features, float scale);
  // dL/dfeatures of the head's cross-entropy on each row towards the label, smoothed
  // by `smoothing` (1: the uniform distribution), averaged over the rows and scaled.
  Tensor tiles_gradient(const Tensor& features, float scale, float smoothing);
  void train_attended_instances(const std::vector<float>& attention, float loss_scale);
  Tensor gather_rows(const std::vector<std::int64_t>& rows) const;
  // Keeps the m rows of H with the highest scores (fills selected_) and returns them.
  Tensor take_top_rows(const std::vector<float>& scores, std::int64_t m);
  // dL/dH from the selected rows' gradient dh [M, D]: zero elsewhere.
  void scatter_selected_gradient(const Tensor& dh);
  Tensor select_rows();  // H, or its top_tiles rows (fills selected_)
  void pass2_selected(const Tensor& x, std::int64_t first_tile);

  ImageModel model_;
  TwoPassOptions options_;
  Tensor h_, dh_;  // host [N, D]
  Tensor scores_;  // attention over all N of the scoring pass (top_tiles)
  std::vector<std::int64_t> selected_;
  std::vector<bool> is_selected_;
  int label_ = 0;
  std::uint64_t dropout_seed_ = 0;
  std::int64_t rows_filled_ = 0;
  std::int64_t kept_tiles_ = 0;
  std::size_t tail_layers_ = 0;  // kept_tail_layers of begin_image
  struct KeptBatch {
    std::int64_t first_tile, rows;
  };
  std::vector<KeptBatch> kept_;  // pass 1's batches whose activations the layers hold
  std::int64_t next_pass2_end_ = 0;  // pass 2 must continue with the batch ending here
  bool instance_ = false;
  std::vector<float> label_probabilities_;  // of the last vote, per tile
};

}  // namespace bigtrain
