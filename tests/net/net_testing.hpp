#pragma once
// Helpers shared by the net tests: drive a layer (or model) with a seeded upstream
// gradient, gather every gradient, and check them against finite differences and
// against the same layer run by the reference backend.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "net/layer.hpp"
#include "net/model_spec.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::net::testing {

using namespace bigtrain::testing;

// A preset's encoder on one grey channel, with a `classes`-way head.
inline ModelSpec grey_preset(const std::string& preset, std::int64_t classes) {
  ModelSpec spec;
  spec.encoder = EncoderSpec::preset_spec(preset);
  spec.encoder.in_channels = 1;
  spec.num_classes = classes;
  return spec;
}

inline void assign(Tensor& target, const std::vector<double>& values) {
  target.copy_from(from_doubles(target.shape(), values, Device::cpu()));
}

// Loss L = sum_i r_i * y_i, so dL/dy = r: any upstream gradient, and one scalar
// to difference.
inline double weighted_sum(const Tensor& y, const std::vector<double>& r) {
  const std::vector<double> values = to_doubles(y);
  EXPECT_EQ(values.size(), r.size());
  double total = 0.0;
  for (std::size_t i = 0; i < values.size() && i < r.size(); ++i) total += values[i] * r[i];
  return total;
}

struct LayerGradients {
  Tensor y;
  std::vector<double> dx;                  // empty when the layer returned no input gradient
  std::vector<std::vector<double>> params;  // in parameters() order
};

// forward (kept) + backward with dy = r; gradients zeroed first.
inline LayerGradients run_forward_backward(Layer& layer, const Tensor& x, const ForwardContext& ctx,
                                           const std::vector<double>& r) {
  layer.zero_grad();
  ForwardContext kept = ctx;
  kept.keep_activations = true;
  LayerGradients out;
  out.y = layer.forward(x, kept).clone();
  const Tensor dy = from_doubles(out.y.shape(), r, out.y.device());
  const Tensor dx = layer.backward(dy);
  if (dx.defined()) out.dx = to_doubles(dx);
  for (Parameter* parameter : layer.parameters()) out.params.push_back(to_doubles(parameter->grad));
  EXPECT_EQ(layer.saved_count(), 0u) << "backward must free everything its forward saved";
  return out;
}

// Finite differences of L(x, params) = sum(r * layer(x)) in float32, against backward.
inline void check_layer_gradients(Layer& layer, const Tensor& x, const ForwardContext& ctx, bool kinks,
                                  const std::string& what, double step = 0.0, std::size_t max_elements = 48,
                                  Tolerance tolerance = {2e-2, 2e-3}) {
  ForwardContext pure = ctx;
  pure.keep_activations = false;
  pure.update_bn_running_stats = false;  // the function differenced must not change between calls
  const Shape y_shape = layer.forward(x, pure).shape();
  const std::vector<double> r = random_doubles(static_cast<std::size_t>(shape_numel(y_shape)), 99);
  const LayerGradients analytic = run_forward_backward(layer, x, pure, r);

  std::vector<Parameter*> parameters = layer.parameters();
  std::vector<std::vector<double>> inputs{to_doubles(x)};
  std::vector<std::vector<double>> gradients{analytic.dx};
  std::vector<std::string> names{"x"};
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    inputs.push_back(to_doubles(parameters[i]->value));
    gradients.push_back(analytic.params[i]);
    names.push_back(parameters[i]->name);
  }
  Tensor x_probe = x.clone();
  auto f = [&](const std::vector<std::vector<double>>& values) {
    assign(x_probe, values[0]);
    for (std::size_t i = 0; i < parameters.size(); ++i) assign(parameters[i]->value, values[i + 1]);
    return weighted_sum(layer.forward(x_probe, pure), r);
  };
  GradCheckOptions options;
  // The layer computes in float32: the step balancing truncation against float
  // rounding is ~eps_f32^(1/3) ~ 5e-3 (op_check's default), and the differences then
  // carry ~eps_f32 |L| / h ~ 1e-5 |L| of rounding noise plus h^2 curvature terms: a
  // 2% bound relative to the gradient's rms (plus 2e-3 absolute for near-zero
  // gradients) separates that noise from real wiring errors (wrong sign, missing
  // term, a gradient landing on the wrong parameter), which are O(1) wrong.
  options.precision = Precision::f32;
  options.step = step;
  options.tolerance = tolerance;
  options.detect_kinks = kinks;
  options.max_elements_per_input = max_elements;
  check_gradients(f, inputs, gradients, options, names, what);
  // restore values the probe wrote
  for (std::size_t i = 0; i < parameters.size(); ++i) assign(parameters[i]->value, inputs[i + 1]);
}

}  // namespace bigtrain::net::testing
