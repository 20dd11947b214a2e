#pragma once
// A layer of a network: forward, backward and named state.
//
// Saved activations form a stack per layer: every forward with keep_activations
// pushes what its backward needs, every backward pops the most recent. So several
// batches may be forwarded before any is backpropagated (a whole image's tile
// batches held at once, as the gradient-equivalence test of the two-pass trainer
// does), provided backward runs in reverse order. A forward without
// keep_activations saves nothing and its backward is an error.
#include <cstddef>
#include <string>
#include <vector>

#include "kernels/core/tensor.hpp"
#include "net/footprint.hpp"
#include "net/forward_context.hpp"
#include "net/parameter.hpp"
#include "net/receptive_field.hpp"

namespace bigtrain::net {

class MemoryWalk;
class PlannedTensor;

class Layer {
 public:
  // `name` is the layer's state_dict prefix ("layer1.0.conv1"); may be empty.
  explicit Layer(std::string name) : name_(std::move(name)) {}
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const std::string& name() const { return name_; }

  virtual Tensor forward(const Tensor& x, const ForwardContext& ctx) = 0;
  // Gradient of the input for the most recent kept forward; accumulates parameter
  // gradients (+=) and frees what that forward saved. May return an undefined
  // tensor when the input gradient was switched off (an encoder's image input).
  virtual Tensor backward(const Tensor& dy) = 0;

  // For the memory planner (net/footprint.hpp): what one forward and backward of
  // an input of `input`'s shape allocate and keep, as `ctx` runs them. Throws
  // bigtrain::Error where forward would (an input too small for a kernel).
  virtual LayerFootprint describe(const Shape& input, const PlanContext& ctx) const = 0;
  // How the planner walks this layer (net/memory_plan.hpp): a leaf is the one
  // call describe() tells (this default); a composite runs its children through
  // `walk` in the order its forward runs them.
  virtual PlannedTensor plan_forward(MemoryWalk& walk, const PlannedTensor& x) const;
  // For streaming the trunk over an image tile by tile (net/streaming.hpp): which
  // input positions each output position reads when the forward runs as `ctx`
  // says. Throws bigtrain::Error naming the layer when an output depends on more
  // than a local window of the input, as this default does (global pooling, a
  // linear layer); a layer with a local window overrides it.
  virtual ReceptiveField receptive_field(const ForwardContext& ctx) const;

  virtual void collect_state(StateRefs& refs) { (void)refs; }
  // Drops every saved activation (e.g. after an aborted step).
  virtual void clear_saved() = 0;
  // Forwards saved and not yet backpropagated, over this layer and its children.
  virtual std::size_t saved_count() const = 0;

  StateRefs state();
  std::vector<Parameter*> parameters();
  void zero_grad();
  // Moves parameters, gradients and buffers to `device` (op caches are rebuilt lazily).
  void to(Device device);

 private:
  std::string name_;
};

// The name of a child of `parent`: "layer1.0" + "conv1".
inline std::string child_name(const Layer& parent, const std::string& child) {
  return join_name(parent.name(), child);
}

}  // namespace bigtrain::net
