// Issue 9: the gradient check the trainer runs after every image's backward pass
// finds every parameter whose gradient holds a NaN, +Inf or -Inf, whatever its
// position, and nothing else: the largest finite floats are gradients too.
// (The end-to-end stop on a non-finite loss, naming image and step, is
// tests/cli/hardening_numerics.sh.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "pipeline/engine/gradient_check.hpp"

namespace bigtrain {
namespace {

net::Parameter parameter(const std::string& name, std::vector<float> grad) {
  net::Parameter p;
  p.name = name;
  const auto n = static_cast<std::int64_t>(grad.size());
  p.value = Tensor::zeros({n});
  p.grad = Tensor::from_vector({n}, grad);
  return p;
}

TEST(HardeningNumerics, NonFiniteGradientsAreFoundByName) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kMax = std::numeric_limits<float>::max();
  constexpr float kTiny = std::numeric_limits<float>::denorm_min();
  for (Backend backend : {Backend::reference, Backend::cpu}) {
    // Long enough that a vectorised check has a tail to get wrong.
    std::vector<float> finite(1027, 0.5f);
    finite[3] = kMax;
    finite[4] = -kMax;
    finite[5] = kTiny;
    std::vector<float> nan_last = finite, inf_first = finite, minus_inf_middle = finite;
    nan_last.back() = kNaN;
    inf_first.front() = kInf;
    minus_inf_middle[517] = -kInf;
    net::Parameter a = parameter("conv1.weight", finite), b = parameter("bn1.bias", nan_last),
                   c = parameter("fc.weight", inf_first), d = parameter("aggregator.attention", minus_inf_middle),
                   no_grad = parameter("layer1.0.conv1.weight", finite);
    no_grad.grad = Tensor();
    EXPECT_EQ(non_finite_gradients(backend, {&a, &b, &no_grad, &c, &d}),
              (std::vector<std::string>{"bn1.bias", "fc.weight", "aggregator.attention"}))
        << "backend " << static_cast<int>(backend);
    EXPECT_TRUE(non_finite_gradients(backend, {&a, &no_grad}).empty());
    // An accumulated overflow: two finite gradients whose sum is +Inf.
    net::Parameter e = parameter("head.bias", {kMax, 1.0f});
    e.accumulate_grad(backend, Tensor::from_vector({2}, std::vector<float>{kMax, 1.0f}));
    EXPECT_EQ(non_finite_gradients(backend, {&a, &e}), (std::vector<std::string>{"head.bias"}));
  }
}

}  // namespace
}  // namespace bigtrain
