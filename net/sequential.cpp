#include "net/sequential.hpp"

#include "kernels/core/error.hpp"
#include "net/batch_norm.hpp"
#include "net/conv2d.hpp"
#include "net/conv_bn_fusion.hpp"
#include "net/memory_plan.hpp"
#include "net/norm_layer.hpp"

namespace bigtrain::net {

namespace {

// The normalisation layer a ReLU at `index` follows, if it does: the pair runs as
// one (NormLayer::forward_with_relu), as in the stem.
NormLayer* norm_before_relu(const std::vector<std::unique_ptr<Layer>>& layers, std::size_t index) {
  if (index == 0 || dynamic_cast<ReLU*>(layers[index].get()) == nullptr) return nullptr;
  return dynamic_cast<NormLayer*>(layers[index - 1].get());
}

// A convolution and the BatchNorm after it may run as one op (net/conv_bn_fusion.hpp);
// split apart, they would round differently from the op, and a kept tail starting
// between them would change the gradients' bits.
bool conv_before_norm(const std::vector<std::unique_ptr<Layer>>& layers, std::size_t index) {
  return index > 0 && index < layers.size() && dynamic_cast<Conv2d*>(layers[index - 1].get()) != nullptr &&
         dynamic_cast<BatchNorm2d*>(layers[index].get()) != nullptr;
}

}  // namespace

Tensor Sequential::forward(const Tensor& x, const ForwardContext& ctx) { return forward_range(x, ctx, 0, layers_.size()); }

Tensor Sequential::backward(const Tensor& dy) { return backward_range(dy, 0, layers_.size()); }

bool Sequential::splits_at(std::size_t index) const {
  return index <= layers_.size() &&
         (index == layers_.size() || (norm_before_relu(layers_, index) == nullptr && !conv_before_norm(layers_, index)));
}

Tensor Sequential::forward_range(const Tensor& x, const ForwardContext& ctx, std::size_t begin, std::size_t end) {
  BT_CHECK(begin <= end && splits_at(begin) && splits_at(end), "`{}`: cannot run children [{}, {}) of {} on their own",
           name(), begin, end, layers_.size());
  if (fuses_conv_bn(ctx)) {
    std::vector<Layer*> layers;
    for (std::size_t i = begin; i < end; ++i) layers.push_back(layers_[i].get());
    return forward_fusing_conv_bn(layers, x, ctx);
  }
  Tensor h = x;
  for (std::size_t i = begin; i < end; ++i) {
    // The previous h is freed unless a layer kept it.
    if (i + 1 < end && norm_before_relu(layers_, i + 1) != nullptr) {
      h = static_cast<NormLayer&>(*layers_[i]).forward_with_relu(h, static_cast<ReLU&>(*layers_[i + 1]), ctx);
      ++i;
    } else {
      h = layers_[i]->forward(h, ctx);
    }
  }
  return h;
}

Tensor Sequential::backward_range(const Tensor& dy, std::size_t begin, std::size_t end) {
  BT_CHECK(begin <= end && splits_at(begin) && splits_at(end), "`{}`: cannot run children [{}, {}) of {} on their own",
           name(), begin, end, layers_.size());
  Tensor d = dy;
  for (std::size_t i = end; i-- > begin;) {
    if (NormLayer* norm = i > begin ? norm_before_relu(layers_, i) : nullptr) {
      d = norm->backward_with_relu(d, static_cast<ReLU&>(*layers_[i]));
      --i;
    } else {
      d = layers_[i]->backward(d);
    }
    // Only the first layer may skip its input gradient (the image's): a layer
    // further in would leave the layers before it holding unusable activations.
    BT_CHECK(d.defined() || i == 0, "`{}`: a layer inside the network returned no input gradient", name());
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
