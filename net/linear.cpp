#include "net/linear.hpp"

#include "kernels/core/error.hpp"
#include "net/init.hpp"

namespace bigtrain::net {
namespace {

kernels::Linear& linear_op(OpCache<kernels::LinearSpec, kernels::Linear>& ops, Backend backend,
                           const kernels::LinearSpec& spec) {
  return ops.get(backend, spec, [](Backend b, const kernels::LinearSpec& s) { return kernels::make_linear(b, s); });
}

}  // namespace

Linear::Linear(std::string name, std::int64_t in_features, std::int64_t out_features, InitSeed seed, bool bias)
    : Layer(std::move(name)), in_features_(in_features), out_features_(out_features), has_bias_(bias) {
  BT_CHECK(in_features > 0 && out_features > 0, "linear `{}`: needs positive sizes, got {} -> {}", this->name(),
           in_features, out_features);
  weight_.name = child_name(*this, "weight");
  weight_.value = Tensor::zeros({out_features, in_features});
  if (bias) {
    bias_.name = child_name(*this, "bias");
    bias_.value = Tensor::zeros({out_features});
  }
  if (seed) reset_parameters(*seed);
}

void Linear::reset_parameters(std::uint64_t seed) {
  InitRandom weight_random(seed, weight_.name);
  default_weight_uniform(weight_.value, weight_random);
  if (has_bias_) {
    InitRandom bias_random(seed, bias_.name);
    default_bias_uniform(bias_.value, in_features_, bias_random);
  }
  weight_.grad = {};
  bias_.grad = {};
}

Tensor Linear::forward(const Tensor& x, const ForwardContext& ctx) {
  BT_CHECK(x.rank() == 2 && x.dim(1) == in_features_, "linear `{}` expects [N,{}], got {}", name(), in_features_,
           x.describe());
  kernels::LinearSpec spec{x.dim(0), in_features_, out_features_, has_bias_, ctx.compute_dtype};
  Tensor y = Tensor::empty(spec.output_shape(), DType::f32, backend_device(ctx.backend));
  linear_op(ops_, ctx.backend, spec).forward(x, weight_.value, has_bias_ ? &bias_.value : nullptr, y);
  if (ctx.keep_activations) saved_.push_back({ctx.backend, spec, x});
  return y;
}

Tensor Linear::backward(const Tensor& dy) {
  BT_CHECK(!saved_.empty(), "linear `{}`: backward without a kept forward", name());
  Saved saved = std::move(saved_.back());
  saved_.pop_back();
  kernels::Linear& linear = linear_op(ops_, saved.backend, saved.spec);
  const Device device = backend_device(saved.backend);
  Tensor dx = Tensor::empty(saved.spec.input_shape(), DType::f32, device);
  linear.backward_data(dy, weight_.value, dx);
  Tensor dweight = Tensor::empty(weight_.value.shape(), DType::f32, device);
  Tensor dbias;
  if (has_bias_) dbias = Tensor::empty(bias_.value.shape(), DType::f32, device);
  linear.backward_weights(saved.x, dy, dweight, has_bias_ ? &dbias : nullptr);
  weight_.accumulate_grad(saved.backend, std::move(dweight));
  if (has_bias_) bias_.accumulate_grad(saved.backend, std::move(dbias));
  return dx;
}

LayerFootprint Linear::describe(const Shape& input, const PlanContext&) const {
  BT_CHECK(input.size() == 2 && input[1] == in_features_, "linear `{}` expects [N,{}], got {}", name(), in_features_,
           shape_str(input));
  LayerFootprint fp;
  fp.kind = "linear";
  fp.output = {input[0], out_features_};
  fp.keeps_input = true;
  // Fresh parameter gradients, added into the accumulated ones before backward returns.
  fp.backward_scratch = allocation_bytes({out_features_, in_features_}) +
                        (has_bias_ ? allocation_bytes({out_features_}) : 0);
  fp.forward_flops = 2.0 * static_cast<double>(input[0] * in_features_ * out_features_);
  fp.backward_flops = 2.0 * fp.forward_flops;
  return fp;
}

void Linear::collect_state(StateRefs& refs) {
  refs.parameters.push_back(&weight_);
  if (has_bias_) refs.parameters.push_back(&bias_);
}

}  // namespace bigtrain::net
