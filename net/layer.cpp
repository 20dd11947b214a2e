#include "net/layer.hpp"

#include "kernels/core/error.hpp"
#include "net/memory_plan.hpp"

namespace bigtrain::net {

PlannedTensor Layer::plan_forward(MemoryWalk& walk, const PlannedTensor& x) const { return walk.leaf(*this, x); }

ReceptiveField Layer::receptive_field(const ForwardContext&) const {
  throw Error(fmt::format("layer `{}` cannot be streamed: each of its outputs depends on the whole input map, not on a local "
          "window, so a tile's output would differ from the whole image's",
                          name()));
}

StateRefs Layer::state() {
  StateRefs refs;
  collect_state(refs);
  return refs;
}

std::vector<Parameter*> Layer::parameters() { return state().parameters; }

void Layer::zero_grad() {
  for (Parameter* parameter : parameters()) parameter->zero_grad();
}

void Layer::to(Device device) {
  StateRefs refs = state();
  for (Parameter* parameter : refs.parameters) {
    if (parameter->value.device() != device) parameter->value = parameter->value.to(device);
    if (parameter->grad.defined() && parameter->grad.device() != device) parameter->grad = parameter->grad.to(device);
  }
  for (Buffer* buffer : refs.buffers)
    if (buffer->value.device() != device) buffer->value = buffer->value.to(device);
}

}  // namespace bigtrain::net
