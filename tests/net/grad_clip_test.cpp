// Clipping by global L2 norm against torch.nn.utils.clip_grad_norm_, on every backend.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/core/error.hpp"
#include "net/grad_clip.hpp"
#include "tests/net/optimizer_torch_oracle.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::net {
namespace {

const std::vector<Shape> kShapes = {{4, 3, 3, 3}, {4}, {10, 4}, {10}, {5}};

// Parameters with seeded gradients; the last has none (skipped, as PyTorch skips None).
std::vector<std::unique_ptr<Parameter>> make_params(Backend backend) {
  std::vector<std::unique_ptr<Parameter>> params;
  for (std::size_t i = 0; i < kShapes.size(); ++i) {
    auto p = std::make_unique<Parameter>();
    p->name = fmt::format("p{}", i);
    p->value = testing::on_backend(Tensor::zeros(kShapes[i]), backend);
    if (i + 1 < kShapes.size()) p->grad = testing::random_tensor(kShapes[i], 300 + i, -1.0f, 1.0f, backend_device(backend));
    params.push_back(std::move(p));
  }
  return params;
}

std::vector<Parameter*> pointers(const std::vector<std::unique_ptr<Parameter>>& params) {
  std::vector<Parameter*> out;
  for (const auto& p : params) out.push_back(p.get());
  return out;
}

// For each max_norm (one PyTorch process for all: importing torch dominates the time),
// PyTorch's total norm, then its clipped gradients, flattened in order.
std::vector<std::vector<double>> torch_clip(const std::vector<Parameter*>& params, const std::vector<double>& max_norms) {
  std::string grads;
  for (const Parameter* p : params)
    grads += p->grad.defined() ? fmt::format("  torch.tensor({}).reshape({}),\n", testing::python_list(p->grad.to_vector()),
                                             fmt::join(p->grad.shape(), ", "))
                               : "  None,\n";
  const std::string script = fmt::format(R"(
import torch
grads = [
{}]
for max_norm in [{}]:
    params = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros(1) if g is None else torch.zeros_like(g))
        p.grad = None if g is None else g.clone()
        params.append(p)
    total = torch.nn.utils.clip_grad_norm_(params, max_norm)
    values = [total.item()]
    for p in params:
        if p.grad is not None:
            values += p.grad.flatten().tolist()
    print(" ".join(repr(v) for v in values))
)",
                                         grads, fmt::join(max_norms, ", "));
  std::vector<std::vector<double>> results;
  std::istringstream lines(testing::run_torch_script(script));
  std::string line;
  while (std::getline(lines, line)) results.push_back(testing::parse_numbers(line));
  return results;
}

class GradClip : public ::testing::TestWithParam<Backend> {};

TEST_P(GradClip, MatchesTorchWhenClippingAndWhenNot) {
  BT_SKIP_UNLESS_AVAILABLE(GetParam());
  if (auto reason = testing::torch_unavailable_reason(); !reason.empty()) GTEST_SKIP() << reason;
  // The gradients' norm is about 6.2: 1.0 clips, 100 leaves them alone.
  const std::vector<double> max_norms{1.0, 100.0};
  const auto all_expected = [&] {
    auto owned = make_params(GetParam());
    return torch_clip(pointers(owned), max_norms);
  }();
  ASSERT_EQ(all_expected.size(), max_norms.size());
  for (std::size_t m = 0; m < max_norms.size(); ++m) {
    const double max_norm = max_norms[m];
    const std::vector<double>& expected = all_expected[m];
    auto owned = make_params(GetParam());
    const auto params = pointers(owned);
    const double total = clip_grad_norm(GetParam(), params, {.max_norm = max_norm});
    // PyTorch sums float32 per-tensor norms; we accumulate squares in double. 1e-6
    // relative is a few float32 ulp of the norm.
    EXPECT_NEAR(total, expected[0], 1e-6 * expected[0]) << "max_norm " << max_norm;
    EXPECT_EQ(total > max_norm, max_norm == 1.0) << "the test's gradients no longer exercise both branches";
    std::size_t offset = 1;
    for (const Parameter* p : params) {
      if (!p->grad.defined()) continue;
      const std::vector<double> want(expected.begin() + offset, expected.begin() + offset + p->grad.numel());
      offset += p->grad.numel();
      // The coefficient max_norm / (norm + 1e-6) inherits the norm's 1e-6 relative difference.
      testing::expect_close(testing::to_doubles(p->grad), want, p->grad.shape(), {.relative = 2e-6, .absolute = 0.0},
                            fmt::format("{} clipped to {}", p->name, max_norm));
    }
    EXPECT_EQ(offset, expected.size());
  }
}

TEST_P(GradClip, ClippedNormEqualsMaxNorm) {
  BT_SKIP_UNLESS_AVAILABLE(GetParam());
  auto owned = make_params(GetParam());
  const auto params = pointers(owned);
  const double before = clip_grad_norm(GetParam(), params, {.max_norm = 0.5});
  EXPECT_GT(before, 0.5);
  // Scaled by 0.5 / (before + 1e-6): the new norm is 0.5 less a hair, up to float32 rounding.
  EXPECT_NEAR(grad_norm(GetParam(), params), 0.5 * before / (before + 1e-6), 1e-6);
}

TEST_P(GradClip, NonFiniteGradientsAreReportedOrPropagated) {
  BT_SKIP_UNLESS_AVAILABLE(GetParam());
  auto owned = make_params(GetParam());
  const auto params = pointers(owned);
  Tensor host = params[2]->grad.to(Device::cpu());
  host.f32()[7] = std::numeric_limits<float>::quiet_NaN();
  params[2]->grad.copy_from(host);
  try {
    clip_grad_norm(GetParam(), params, {.max_norm = 1.0, .error_if_nonfinite = true});
    FAIL() << "a NaN gradient was not reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("p2"), std::string::npos) << e.what();
  }
  // Without the check, PyTorch's behaviour: a NaN norm, and NaN spread into every gradient.
  EXPECT_TRUE(std::isnan(clip_grad_norm(GetParam(), params, {.max_norm = 1.0})));
  EXPECT_TRUE(std::isnan(params[0]->grad.to_vector()[0]));
}

TEST(GradClipArgs, RejectsNonPositiveMaxNormAndHandlesNoGradients) {
  auto owned = make_params(Backend::cpu);
  const auto params = pointers(owned);
  EXPECT_THROW(clip_grad_norm(Backend::cpu, params, {.max_norm = 0.0}), Error);
  const std::vector<Parameter*> without_grad{params.back()};
  EXPECT_EQ(clip_grad_norm(Backend::cpu, without_grad, {.max_norm = 1.0}), 0.0);
}

INSTANTIATE_TEST_SUITE_P(Backends, GradClip, ::testing::ValuesIn(testing::all_backends()),
                         testing::backend_param_name);

}  // namespace
}  // namespace bigtrain::net
