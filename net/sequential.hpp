#pragma once
// Children run in order; backward in reverse. Children carry their full
// state_dict names, so the container adds no prefix of its own.
#include <memory>
#include <vector>

#include "net/layer.hpp"

namespace bigtrain::net {

class Sequential : public Layer {
 public:
  explicit Sequential(std::string name = {}) : Layer(std::move(name)) {}

  template <typename T>
  T& add(std::unique_ptr<T> layer) {
    T& ref = *layer;
    layers_.push_back(std::move(layer));
    return ref;
  }

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  // Children [begin, end) alone, so that a caller may run the first children one
  // way and the rest another: a two-pass step keeps only the deepest children's
  // activations in pass 1 (pipeline/engine/two_pass.hpp). backward_range pops what
  // the last forward_range of the same children kept.
  Tensor forward_range(const Tensor& x, const ForwardContext& ctx, std::size_t begin, std::size_t end);
  Tensor backward_range(const Tensor& dy, std::size_t begin, std::size_t end);
  // Whether the children may run as [0, index) and [index, size()): everywhere but
  // between a normalisation and the ReLU that runs as one op with it, and between a
  // convolution and the BatchNorm that may run as one op with it.
  bool splits_at(std::size_t index) const;
  LayerFootprint describe(const Shape& input, const PlanContext& ctx) const override;
  PlannedTensor plan_forward(MemoryWalk& walk, const PlannedTensor& x) const override;
  ReceptiveField receptive_field(const ForwardContext& ctx) const override;
  void collect_state(StateRefs& refs) override;
  void clear_saved() override;
  std::size_t saved_count() const override;

  std::size_t size() const { return layers_.size(); }
  Layer& at(std::size_t index) { return *layers_.at(index); }

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
};

}  // namespace bigtrain::net
