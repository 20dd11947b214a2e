#include "net/group_norm.hpp"

#include "kernels/core/error.hpp"

namespace bigtrain::net {

GroupNorm::GroupNorm(std::string name, std::int64_t groups, std::int64_t channels)
    : NormLayer(std::move(name)), groups_(groups), channels_(channels) {
  BT_CHECK(groups >= 1 && channels >= 1 && channels % groups == 0,
           "group norm `{}`: {} groups must divide its {} channels", this->name(), groups, channels);
  weight_ = {child_name(*this, "weight"), Tensor::empty({channels}), {}};
  weight_.value.fill(1.0f);
  bias_ = {child_name(*this, "bias"), Tensor::zeros({channels}), {}};
}

kernels::GroupNorm& GroupNorm::op(Backend backend, const kernels::GroupNormSpec& spec) {
  return ops_.get(backend, spec,
                  [](Backend b, const kernels::GroupNormSpec& s) { return kernels::make_group_norm(b, s); });
}

kernels::GroupNormSpec GroupNorm::spec_for(const Shape& input) const {
  BT_CHECK(input.size() == 4 && input[1] == channels_, "group norm `{}` expects [N,{},H,W], got {}", name(),
           channels_, shape_str(input));
  kernels::GroupNormSpec spec;
  spec.batch = input[0];
  spec.channels = channels_;
  spec.height = input[2];
  spec.width = input[3];
  spec.groups = groups_;
  spec.epsilon = kEpsilon;
  return spec;
}

Tensor GroupNorm::forward(const Tensor& x, const ForwardContext& ctx) {
  const kernels::GroupNormSpec spec = spec_for(x.shape());
  const Device device = backend_device(ctx.backend);
  Tensor y = Tensor::empty(x.shape(), DType::f32, device);
  Tensor save_mean = Tensor::empty(spec.statistics_shape(), DType::f32, device);
  Tensor save_invstd = Tensor::empty(spec.statistics_shape(), DType::f32, device);
  op(ctx.backend, spec).forward(x, weight_.value, bias_.value, y, save_mean, save_invstd);
  if (ctx.keep_activations) saved_.push_back({ctx.backend, spec, x, std::move(save_mean), std::move(save_invstd)});
  return y;
}

ReceptiveField GroupNorm::receptive_field(const ForwardContext&) const {
  throw Error(fmt::format("group norm `{}` cannot be streamed: each output is normalised by the mean and variance of "
                          "its whole feature map, which a tile does not see; use model.norm: batch with frozen "
                          "statistics to stream",
                          name()));
}

Tensor GroupNorm::backward(const Tensor& dy) {
  BT_CHECK(!saved_.empty(), "group norm `{}`: backward without a kept forward", name());
  Saved saved = std::move(saved_.back());
  saved_.pop_back();
  const Device device = backend_device(saved.backend);
  Tensor dx = Tensor::empty(saved.spec.input_shape(), DType::f32, device);
  Tensor dgamma = Tensor::empty({channels_}, DType::f32, device);
  Tensor dbeta = Tensor::empty({channels_}, DType::f32, device);
  op(saved.backend, saved.spec)
      .backward(saved.x, dy, weight_.value, saved.save_mean, saved.save_invstd, dx, dgamma, dbeta);
  weight_.accumulate_grad(saved.backend, std::move(dgamma));
  bias_.accumulate_grad(saved.backend, std::move(dbeta));
  return dx;
}

LayerFootprint GroupNorm::describe(const Shape& input, const PlanContext& ctx) const {
  const kernels::GroupNormSpec spec = spec_for(input);
  const std::size_t statistic = allocation_bytes(spec.statistics_shape());
  const std::size_t channel = allocation_bytes({channels_});
  LayerFootprint fp;
  fp.kind = "groupnorm";
  fp.output = input;
  fp.keeps_input = true;
  if (ctx.forward.keep_activations)
    fp.kept = {static_cast<std::size_t>(spec.batch * groups_) * sizeof(float),
               static_cast<std::size_t>(spec.batch * groups_) * sizeof(float)};  // save_mean, save_invstd
  else
    fp.forward_scratch = 2 * statistic;
  fp.backward_scratch = 2 * channel;  // dgamma, dbeta before they are accumulated
  return fp;
}

void GroupNorm::collect_state(StateRefs& refs) {
  refs.parameters.push_back(&weight_);
  refs.parameters.push_back(&bias_);
}

}  // namespace bigtrain::net
