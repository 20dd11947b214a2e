#include "net/sequential.hpp"

#include "kernels/core/error.hpp"
#include "net/conv_bn_fusion.hpp"
#include "net/memory_plan.hpp"

namespace bigtrain::net {

Tensor Sequential::forward(const Tensor& x, const ForwardContext& ctx) {
  if (fuses_conv_bn(ctx)) {
    std::vector<Layer*> layers;
    for (auto& layer : layers_) layers.push_back(layer.get());
    return forward_fusing_conv_bn(layers, x, ctx);
  }
  Tensor h = x;
  for (auto& layer : layers_) h = layer->forward(h, ctx);  // the previous h is freed unless a layer kept it
  return h;
}

Tensor Sequential::backward(const Tensor& dy) {
  Tensor d = dy;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
    d = (*it)->backward(d);
    // Only the first layer may skip its input gradient (the image's): a layer
    // further in would leave the layers before it holding unusable activations.
    BT_CHECK(d.defined() || std::next(it) == layers_.rend(),
             "`{}`: a layer inside the network returned no input gradient", name());
  }
  return d;
}

LayerFootprint Sequential::describe(const Shape& input, const PlanContext& ctx) const {
  return describe_by_walking(*this, input, ctx);
}

PlannedTensor Sequential::plan_forward(MemoryWalk& walk, const PlannedTensor& x) const {
  if (fuses_conv_bn(walk.context().forward)) {
    std::vector<const Layer*> layers;
    for (const auto& layer : layers_) layers.push_back(layer.get());
    return plan_fusing_conv_bn(walk, layers, x);
  }
  PlannedTensor h = x;
  for (const auto& layer : layers_) h = walk.forward(*layer, h);
  return h;
}

ReceptiveField Sequential::receptive_field(const ForwardContext& ctx) const {
  ReceptiveField field = ReceptiveField::identity();
  for (const auto& layer : layers_) field = field.then(layer->receptive_field(ctx));
  return field;
}

void Sequential::collect_state(StateRefs& refs) {
  for (auto& layer : layers_) layer->collect_state(refs);
}

void Sequential::clear_saved() {
  for (auto& layer : layers_) layer->clear_saved();
}

std::size_t Sequential::saved_count() const {
  std::size_t count = 0;
  for (const auto& layer : layers_) count += layer->saved_count();
  return count;
}

}  // namespace bigtrain::net
