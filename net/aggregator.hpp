#pragma once
// Aggregators: the tile features of one image H [N, D] -> one image feature z [1, D]
// that the head classifies. A layer like any other (forward/backward, saved stack,
// named state), so the trainer backpropagates the head loss through it to get
// dL/dH, the upstream gradient of pass 2.
//
//   mean       z = 1/N sum_i h_i
//   max        z_d = max_i h_id (the gradient goes to the arg-max tile of each feature)
//   attention  a = softmax_i(w^T (tanh(V h_i) ⊙ sigm(U h_i)))  (gated; Ilse et al. 2018,
//              "Attention-based Deep Multiple Instance Learning"), or
//              a = softmax_i(w^T tanh(V h_i)) without the gate;  z = sum_i a_i h_i
//   instance   no pooling of features: the head classifies every tile, each tile is
//              trained with the image's label, and the image's log-probabilities are
//              the mean of its tiles' (a vote; pipeline/two_pass.hpp). The layer's
//              own forward is the mean, so the planner and checkpoints see a
//              parameter-free pooling.
//
// Optional dropout on z in training. State names follow Ilse et al.'s PyTorch code:
// `<name>.attention_V.{weight,bias}`, `<name>.attention_U.{weight,bias}`,
// `<name>.attention_w.weight` (no bias: softmax ignores a constant, so its gradient is 0).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "net/dropout.hpp"
#include "net/layer.hpp"
#include "net/linear.hpp"

namespace bigtrain::net {

enum class AggregatorKind : std::uint8_t { mean, max, attention, instance };

AggregatorKind parse_aggregator_kind(const std::string& name);  // "mean" | "max" | "attention" | "instance"
const char* aggregator_kind_name(AggregatorKind kind);

struct AggregatorSpec {
  AggregatorKind kind = AggregatorKind::attention;
  std::int64_t hidden = 128;  // attention: size L of V h and U h
  bool gated = true;
  float dropout = 0.0f;  // on z, training only
};

class Aggregator : public Layer {
 public:
  Aggregator(std::string name, std::int64_t features, float dropout);

  // h [N, D] -> z [1, D]
  Tensor forward(const Tensor& h, const ForwardContext& ctx) final;
  // dz [1, D] -> dH [N, D]; accumulates the aggregator's parameter gradients.
  Tensor backward(const Tensor& dz) final;
  // The pooling h [N, D] -> z [D]; plan_forward walks the dropout on z after it.
  LayerFootprint describe(const Shape& h, const PlanContext& ctx) const final;
  PlannedTensor plan_forward(MemoryWalk& walk, const PlannedTensor& h) const final;
  void clear_saved() override;
  std::size_t saved_count() const override;
  void collect_state(StateRefs& refs) override;

  std::int64_t features() const { return features_; }
  virtual AggregatorKind kind() const = 0;
  // The attention weights a [N] of the most recent forward (inference or training),
  // for heatmaps; undefined for mean and max, which weigh no tile.
  const Tensor& attention() const { return attention_; }

 protected:
  virtual Tensor pool(const Tensor& h, const ForwardContext& ctx) = 0;        // -> z [D]
  virtual Tensor pool_backward(const Tensor& dz) = 0;                          // dz [D] -> dH
  virtual LayerFootprint pool_describe(const Shape& h, const PlanContext& ctx) const = 0;
  virtual void clear_pool_saved() = 0;
  virtual std::size_t pool_saved_count() const = 0;
  virtual void collect_pool_state(StateRefs& refs) { (void)refs; }

  Tensor attention_;

 private:
  std::int64_t features_;
  Dropout dropout_;
};

std::unique_ptr<Aggregator> make_aggregator(const AggregatorSpec& spec, std::int64_t features, std::uint64_t seed,
                                            std::string name = "aggregator");

}  // namespace bigtrain::net
