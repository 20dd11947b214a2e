#pragma once
// One ResNet training step in a given compute dtype on any backend, and the
// whole-step comparison the mixed-precision model tests use.
//
// Why no elementwise tolerance, as the float32 model tests have: two bf16 steps
// that sum in different orders diverge to about the size of bf16's own effect. A
// float32 difference of a few ulps moves a value across a bf16 rounding boundary of
// the next layer's input; that one-ulp (2^-8) change feeds hundreds of outputs, each
// now likely to round differently in turn, so after a few layers the two runs round
// independently, and training BatchNorm over 16 values per channel at layer 4
// amplifies it. The precise claims are per op (MixedBackend.*: every output within
// the rounding of the oracle on rounded operands); a whole step is checked for its
// plumbing: every tensor near the reference's bf16 step, and nearer to it than the
// same backend's float32 step is.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/cross_entropy.hpp"
#include "net/model.hpp"
#include "net/optimizer.hpp"
#include "tests/net/net_testing.hpp"

namespace bigtrain::net::testing {

// Logits, then each parameter's gradient, then its value after one SGD step.
inline std::vector<std::vector<double>> mixed_training_step(Model& model, Backend backend, DType compute_dtype,
                                                            const Tensor& host_x, const Tensor& host_targets) {
  const Device device = backend_device(backend);
  model.to(device);
  Sgd optimizer(split_decay_groups(model.parameters()), SgdOptions{0.05, 0.9, 0.0, 1e-4, false}, backend);
  model.zero_grad();
  ForwardContext ctx = ForwardContext::train(backend);
  ctx.compute_dtype = compute_dtype;
  const Tensor logits = model.forward(host_x.to(device), ctx);
  Tensor dlogits = Tensor::empty(logits.shape(), DType::f32, device);
  kernels::cross_entropy(backend, logits, host_targets.to(device), nullptr, {}, dlogits);
  std::vector<std::vector<double>> tensors{to_doubles(logits)};
  model.backward(dlogits);
  for (Parameter* p : model.parameters()) tensors.push_back(to_doubles(p->grad));
  optimizer.step();
  for (Parameter* p : model.parameters()) tensors.push_back(to_doubles(p->value));
  return tensors;
}

// |a - b| / |b| in the Euclidean norm.
inline double relative_distance(const std::vector<double>& a, const std::vector<double>& b) {
  double difference = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) difference += (a[i] - b[i]) * (a[i] - b[i]), norm += b[i] * b[i];
  return std::sqrt(difference / std::max(norm, 1e-300));
}

struct MixedStepDistances {
  double worst = 0.0;  // the largest per-tensor distance of the bf16 step to the reference's
  std::string worst_tensor;
  double ratio = 0.0;  // rms over tensors of that distance / the float32 step's
  double from_float32 = 0.0;  // rms over tensors of the bf16 step's distance to the float32 step
};

// Expects every tensor of `bf16` within `per_tensor_limit` of `expected` (relative
// distance), and returns the distances for the caller's bound on the ratio.
inline MixedStepDistances compare_mixed_steps(const std::vector<std::vector<double>>& expected,
                                              const std::vector<std::vector<double>>& bf16,
                                              const std::vector<std::vector<double>>& fp32, Model& model,
                                              double per_tensor_limit) {
  std::vector<std::string> names{"logits"};
  for (Parameter* p : model.parameters()) names.push_back("d " + p->name);
  for (Parameter* p : model.parameters()) names.push_back("after the step: " + p->name);
  MixedStepDistances out;
  EXPECT_EQ(bf16.size(), names.size());
  EXPECT_EQ(fp32.size(), names.size());
  if (bf16.size() != names.size() || fp32.size() != names.size()) return out;
  double bf16_squares = 0.0, fp32_squares = 0.0, apart_squares = 0.0;
  for (std::size_t i = 0; i < names.size(); ++i) {
    const double to_bf16 = relative_distance(bf16[i], expected[i]), to_fp32 = relative_distance(fp32[i], expected[i]);
    EXPECT_LT(to_bf16, per_tensor_limit) << names[i] << " (float32 step: " << to_fp32 << ")";
    if (to_bf16 > out.worst) out.worst = to_bf16, out.worst_tensor = names[i];
    bf16_squares += to_bf16 * to_bf16, fp32_squares += to_fp32 * to_fp32;
    const double apart = relative_distance(bf16[i], fp32[i]);
    apart_squares += apart * apart;
  }
  const double tensors = static_cast<double>(names.size());
  out.ratio = std::sqrt(bf16_squares / fp32_squares);
  out.from_float32 = std::sqrt(apart_squares / tensors);
  std::printf("bf16 step vs the reference's: worst tensor %.3g (%s), rms over tensors %.3g x the float32 step's; "
              "rms distance to the float32 step %.3g\n",
              out.worst, out.worst_tensor.c_str(), out.ratio, out.from_float32);
  return out;
}

}  // namespace bigtrain::net::testing
