// The op-test harness must itself be able to fail: wrong values and wrong gradients
// are reported, kinks are recognised rather than reported as wrong gradients.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/op_check.hpp"

namespace bigtrain::testing {
namespace {

TEST(OpCheck, RandomTensorsAreSeeded) {
  const Tensor a = random_tensor({3, 4}, 7), b = random_tensor({3, 4}, 7), c = random_tensor({3, 4}, 8);
  EXPECT_EQ(a.to_vector(), b.to_vector());
  EXPECT_NE(a.to_vector(), c.to_vector());
  for (float v : a.to_vector()) {
    EXPECT_GE(v, -1.0f);
    EXPECT_LT(v, 1.0f);
  }
}

TEST(OpCheck, ExpectCloseNamesTheWorstElement) {
  Tensor expected = random_tensor({2, 3, 4}, 1);
  Tensor actual = expected.clone();
  EXPECT_TRUE(expect_close(actual, expected, {1e-6, 0.0}, "identical"));
  actual.f32()[17] += 0.5f;  // flat 17 = [1,1,1]
  EXPECT_NONFATAL_FAILURE(expect_close(actual, expected, {1e-3, 0.0}, "perturbed"), "worst at [1,1,1] (flat 17)");
  actual.f32()[17] = NAN;
  EXPECT_NONFATAL_FAILURE(expect_close(actual, expected, {1e-3, 0.0}, "nan"), "worst at [1,1,1]");
}

TEST(OpCheck, ToleranceIsScaledToTheTensorMagnitude) {
  // An element that cancelled to ~0 is held to the tensor's rms, not to its own size.
  const std::vector<double> expected{100.0, -100.0, 1e-6}, actual{100.0, -100.0, 1e-3};
  EXPECT_TRUE(expect_close(actual, expected, {{3}}, {1e-4, 0.0}, "cancellation"));
}

TEST(OpCheck, GradientCheckerAcceptsCorrectAndRejectsWrongGradients) {
  // f(x, y) = sum_i sin(x_i) * y_i^2
  auto f = [](const std::vector<std::vector<double>>& in) {
    double s = 0;
    for (std::size_t i = 0; i < in[0].size(); ++i) s += std::sin(in[0][i]) * in[1][i] * in[1][i];
    return s;
  };
  std::vector<std::vector<double>> inputs{random_doubles(20, 1), random_doubles(20, 2)};
  std::vector<std::vector<double>> grads(2, std::vector<double>(20));
  for (std::size_t i = 0; i < 20; ++i) {
    grads[0][i] = std::cos(inputs[0][i]) * inputs[1][i] * inputs[1][i];
    grads[1][i] = 2 * std::sin(inputs[0][i]) * inputs[1][i];
  }
  GradCheckOptions options;
  options.tolerance = {1e-7, 1e-10};  // double evaluation, step 1e-5: truncation ~1e-10 relative
  EXPECT_TRUE(check_gradients(f, inputs, grads, options, {"x", "y"}, "smooth").ok);
  grads[1][5] *= 1.01;
  EXPECT_NONFATAL_FAILURE(check_gradients(f, inputs, grads, options, {"x", "y"}, "wrong"), "worst element 5");
}

TEST(OpCheck, GradientCheckerRecognisesKinks) {
  // f(x) = sum relu(x_i) * w_i with one x exactly at the kink and one within the step of it.
  std::vector<double> w = random_doubles(10, 3, 0.5, 1.5);
  auto f = [&](const std::vector<std::vector<double>>& in) {
    double s = 0;
    for (std::size_t i = 0; i < w.size(); ++i) s += std::max(in[0][i], 0.0) * w[i];
    return s;
  };
  std::vector<std::vector<double>> inputs{random_doubles(10, 4)};
  inputs[0][2] = 0.0;
  inputs[0][7] = 3e-6;
  std::vector<std::vector<double>> grads(1, std::vector<double>(10));
  for (std::size_t i = 0; i < w.size(); ++i) grads[0][i] = inputs[0][i] > 0 ? w[i] : 0.0;  // PyTorch's choice at 0
  GradCheckOptions options;
  options.detect_kinks = true;
  const GradCheckReport report = check_gradients(f, inputs, grads, options, {"x"}, "relu");
  EXPECT_TRUE(report.ok);
  EXPECT_EQ(report.checked, 8u);
  EXPECT_EQ(report.kinks_one_sided, 2u);
  // Without detection the central difference at the kink (w/2) is reported as wrong.
  options.detect_kinks = false;
  EXPECT_NONFATAL_FAILURE(check_gradients(f, inputs, grads, options, {"x"}, "relu"), "differ");
}

}  // namespace
}  // namespace bigtrain::testing
