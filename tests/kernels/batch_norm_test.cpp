// BatchNorm2d: every backend against the reference evaluated in double precision
// on the same float inputs; the reference's gradients against finite differences;
// the running statistics against PyTorch's definition on a hand-worked example.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/batch_norm.hpp"
#include "kernels/core/error.hpp"
#include "kernels/reference/batch_norm.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using namespace bigtrain::testing;

struct BnCase {
  std::string name;
  BatchNormSpec spec;
  float offset = 0.0f;  // x ~ offset + spread * U(-1, 1)
  float spread = 1.0f;
};
void PrintTo(const BnCase& c, std::ostream* os) { *os << c.name; }

BatchNormSpec bn(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, float eps = 1e-5f) {
  BatchNormSpec s;
  s.batch = n, s.channels = c, s.height = h, s.width = w, s.epsilon = eps;
  return s;
}

const std::vector<BnCase>& cases() {
  static const std::vector<BnCase> table{
      {"n2_c3_odd", bn(2, 3, 5, 7)},
      {"batch1", bn(1, 4, 3, 3)},
      {"c16_multiple_of_8", bn(4, 16, 8, 8)},
      {"c20_odd_spatial", bn(2, 20, 13, 11)},
      {"spatial_1x1_after_pooling", bn(6, 5, 1, 1)},
      {"two_values_per_channel", bn(1, 2, 1, 2)},
      {"c64_batch8", bn(8, 64, 4, 4)},
      {"planes_longer_than_a_summation_chunk", bn(2, 3, 40, 37)},  // 1480 > 1024 values per plane
      // Mean far from zero: a one-pass E[x^2]-E[x]^2 variance would lose it all.
      {"offset_mean_small_spread", bn(2, 3, 6, 5), 50.0f, 0.5f},
      // Variance far below epsilon: epsilon dominates, invstd ~ 1/sqrt(eps).
      {"variance_below_eps", bn(2, 3, 4, 4, 1e-3f), 0.2f, 1e-3f},
  };
  return table;
}

// Per element the op sums over count = N*H*W values (mean, variance, the two
// gradient sums). Worst-case fp32 summation error grows as count*eps*rms(term),
// i.e. sqrt(count)*eps relative to the rms-scaled bound; a mean `offset` far above
// the `spread` of the values scales the absolute error of the mean by offset/spread
// relative to what the normalised output can tolerate. 16x headroom for the few
// extra roundings per element (subtract, two multiplies, add, the sqrt of invstd).
Tolerance fp32_tolerance(const BnCase& c) {
  const double eps = std::numeric_limits<float>::epsilon();
  const double count = static_cast<double>(c.spec.batch * c.spec.height * c.spec.width);
  const double conditioning = 1.0 + std::abs(c.offset) / c.spread;
  return {16.0 * eps * std::sqrt(count) * conditioning, 0.0};
}

struct Inputs {
  Tensor x, gamma, beta, dy, running_mean, running_var;
};

Inputs make_inputs(const BnCase& c) {
  const BatchNormSpec& s = c.spec;
  Inputs in;
  in.x = random_tensor(s.input_shape(), 11, c.offset - c.spread, c.offset + c.spread);
  in.gamma = random_tensor(s.channel_shape(), 12, 0.5f, 1.5f);
  in.beta = random_tensor(s.channel_shape(), 13);
  in.dy = random_tensor(s.input_shape(), 14);
  in.running_mean = random_tensor(s.channel_shape(), 15, c.offset - c.spread, c.offset + c.spread);
  in.running_var = random_tensor(s.channel_shape(), 16, 0.5f * c.spread * c.spread, 1.5f * c.spread * c.spread);
  return in;
}

class BatchNormBackend : public ::testing::TestWithParam<std::tuple<Backend, BnCase>> {
 protected:
  void SetUp() override {
    BT_SKIP_UNLESS_AVAILABLE(backend());
    op_ = make_batch_norm(backend(), spec());
    in_ = make_inputs(test_case());
  }
  Backend backend() const { return std::get<0>(GetParam()); }
  const BnCase& test_case() const { return std::get<1>(GetParam()); }
  const BatchNormSpec& spec() const { return test_case().spec; }
  Tensor dev(const Tensor& t) const { return on_backend(t, backend()); }

  std::unique_ptr<BatchNorm2d> op_;
  Inputs in_;
};

TEST_P(BatchNormBackend, ForwardTrainingAndRunningStatistics) {
  const BatchNormSpec& s = spec();
  const float momentum = 0.1f;
  Tensor y = nan_tensor(s.input_shape(), backend()), mean = nan_tensor(s.channel_shape(), backend()),
         invstd = nan_tensor(s.channel_shape(), backend());
  Tensor running_mean = dev(in_.running_mean), running_var = dev(in_.running_var);
  running_mean = running_mean.clone(), running_var = running_var.clone();  // updated in place
  op_->forward_training(dev(in_.x), dev(in_.gamma), dev(in_.beta), y, mean, invstd, &running_mean, &running_var,
                        momentum);

  std::vector<double> y_ref(numel(s.input_shape())), mean_ref(s.channels), invstd_ref(s.channels);
  std::vector<double> rm_ref = to_doubles(in_.running_mean), rv_ref = to_doubles(in_.running_var);
  reference::batch_norm_forward_training<double>(s, to_doubles(in_.x).data(), to_doubles(in_.gamma).data(),
                                                 to_doubles(in_.beta).data(), y_ref.data(), mean_ref.data(),
                                                 invstd_ref.data(), rm_ref.data(), rv_ref.data(), momentum);
  const Tolerance tol = fp32_tolerance(test_case());
  expect_close(to_doubles(y), y_ref, s.input_shape(), tol, "y");
  expect_close(to_doubles(mean), mean_ref, s.channel_shape(), tol, "save_mean");
  expect_close(to_doubles(invstd), invstd_ref, s.channel_shape(), tol, "save_invstd");
  expect_close(to_doubles(running_mean), rm_ref, s.channel_shape(), tol, "running_mean");
  expect_close(to_doubles(running_var), rv_ref, s.channel_shape(), tol, "running_var");

  // Without running statistics nothing else changes and the outputs are the same.
  Tensor y2 = nan_tensor(s.input_shape(), backend());
  op_->forward_training(dev(in_.x), dev(in_.gamma), dev(in_.beta), y2, mean, invstd, nullptr, nullptr, momentum);
  EXPECT_EQ(y2.to_vector(), y.to_vector()) << "same inputs, same primitive: bitwise equal";
}

TEST_P(BatchNormBackend, ForwardInference) {
  const BatchNormSpec& s = spec();
  Tensor y = nan_tensor(s.input_shape(), backend());
  op_->forward_inference(dev(in_.x), dev(in_.gamma), dev(in_.beta), dev(in_.running_mean), dev(in_.running_var), y);
  std::vector<double> y_ref(numel(s.input_shape()));
  reference::batch_norm_forward_inference<double>(s, to_doubles(in_.x).data(), to_doubles(in_.gamma).data(),
                                                  to_doubles(in_.beta).data(), to_doubles(in_.running_mean).data(),
                                                  to_doubles(in_.running_var).data(), y_ref.data());
  expect_close(to_doubles(y), y_ref, s.input_shape(), fp32_tolerance(test_case()), "y");
}

TEST_P(BatchNormBackend, BackwardTraining) {
  const BatchNormSpec& s = spec();
  // The saved statistics as a float forward pass would produce them.
  std::vector<double> y_ref(numel(s.input_shape())), mean_d(s.channels), invstd_d(s.channels);
  reference::batch_norm_forward_training<double>(s, to_doubles(in_.x).data(), to_doubles(in_.gamma).data(),
                                                 to_doubles(in_.beta).data(), y_ref.data(), mean_d.data(),
                                                 invstd_d.data(), nullptr, nullptr, 0.0);
  const Tensor mean = from_doubles(s.channel_shape(), mean_d), invstd = from_doubles(s.channel_shape(), invstd_d);

  Tensor dx = nan_tensor(s.input_shape(), backend()), dgamma = nan_tensor(s.channel_shape(), backend()),
         dbeta = nan_tensor(s.channel_shape(), backend());
  op_->backward_training(dev(in_.x), dev(in_.dy), dev(in_.gamma), dev(mean), dev(invstd), dx, dgamma, dbeta,
                         nullptr);

  std::vector<double> dx_ref(numel(s.input_shape())), dgamma_ref(s.channels), dbeta_ref(s.channels);
  reference::batch_norm_backward_training<double>(s, to_doubles(in_.x).data(), to_doubles(in_.dy).data(),
                                                  to_doubles(in_.gamma).data(), to_doubles(mean).data(),
                                                  to_doubles(invstd).data(), dx_ref.data(), dgamma_ref.data(),
                                                  dbeta_ref.data());
  const Tolerance tol = fp32_tolerance(test_case());
  // dx = gamma*invstd*(dy - mean(dy) - xhat*mean(dy*xhat)) can cancel to far below
  // its terms (with two values per channel it is ~eps/var of them), so its error is
  // bounded by the size of the terms, gamma*invstd*dy, not by the size of dx.
  double term_scale = 0.0;
  for (std::int64_t c = 0; c < s.channels; ++c)
    term_scale = std::max(term_scale, std::abs(in_.gamma.f32()[c] * invstd_d[c]));
  const std::vector<double> dy_values = to_doubles(in_.dy);
  const double dy_rms = std::sqrt(std::inner_product(dy_values.begin(), dy_values.end(), dy_values.begin(), 0.0) /
                                  static_cast<double>(dy_values.size()));
  expect_close(to_doubles(dx), dx_ref, s.input_shape(), {tol.relative, tol.relative * term_scale * dy_rms}, "dx");
  expect_close(to_doubles(dgamma), dgamma_ref, s.channel_shape(), tol, "dgamma");
  expect_close(to_doubles(dbeta), dbeta_ref, s.channel_shape(), tol, "dbeta");
}

TEST_P(BatchNormBackend, BackwardInference) {
  const BatchNormSpec& s = spec();
  Tensor dx = nan_tensor(s.input_shape(), backend()), dgamma = nan_tensor(s.channel_shape(), backend()),
         dbeta = nan_tensor(s.channel_shape(), backend());
  op_->backward_inference(dev(in_.x), dev(in_.dy), dev(in_.gamma), dev(in_.running_mean), dev(in_.running_var), dx,
                          dgamma, dbeta, nullptr);
  std::vector<double> dx_ref(numel(s.input_shape())), dgamma_ref(s.channels), dbeta_ref(s.channels);
  reference::batch_norm_backward_inference<double>(
      s, to_doubles(in_.x).data(), to_doubles(in_.dy).data(), to_doubles(in_.gamma).data(),
      to_doubles(in_.running_mean).data(), to_doubles(in_.running_var).data(), dx_ref.data(), dgamma_ref.data(),
      dbeta_ref.data());
  const Tolerance tol = fp32_tolerance(test_case());
  expect_close(to_doubles(dx), dx_ref, s.input_shape(), tol, "dx");
  expect_close(to_doubles(dgamma), dgamma_ref, s.channel_shape(), tol, "dgamma");
  expect_close(to_doubles(dbeta), dbeta_ref, s.channel_shape(), tol, "dbeta");
}

std::string backend_case_name(const ::testing::TestParamInfo<std::tuple<Backend, BnCase>>& info) {
  return std::string(backend_name(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Cases, BatchNormBackend,
                         ::testing::Combine(::testing::ValuesIn(all_backends()), ::testing::ValuesIn(cases())),
                         backend_case_name);

// The reference's backward passes against central differences of sum(y * r), in double.
class BatchNormReferenceGradients : public ::testing::TestWithParam<BnCase> {};

TEST_P(BatchNormReferenceGradients, MatchFiniteDifferences) {
  const BatchNormSpec& s = GetParam().spec;
  const Inputs in = make_inputs(GetParam());
  const std::vector<double> r = random_doubles(numel(s.input_shape()), 17);
  const std::vector<double> rm = to_doubles(in.running_mean), rv = to_doubles(in.running_var);
  auto weighted_sum = [&](const std::vector<double>& y) {
    double sum = 0;
    for (std::size_t i = 0; i < y.size(); ++i) sum += y[i] * r[i];
    return sum;
  };
  std::vector<std::vector<double>> inputs{to_doubles(in.x), to_doubles(in.gamma), to_doubles(in.beta)};
  std::vector<double> y(numel(s.input_shape())), mean(s.channels), invstd(s.channels);

  GradCheckOptions options;
  // Smooth in every input: central differences with step 1e-5 (scaled by |x|) have
  // truncation error ~ step^2 * f''' relative, and double rounding ~1e-16/step.
  // An input offset of 50 scales the absolute step by 50 and the truncation by 2500.
  options.tolerance = {1e-6 * (1.0 + GetParam().offset * GetParam().offset / 100.0), 1e-9};
  options.max_elements_per_input = 48;  // spread over the tensor; keeps the test fast
  {
    SCOPED_TRACE("training (through the batch statistics)");
    auto loss = [&](const std::vector<std::vector<double>>& v) {
      reference::batch_norm_forward_training<double>(s, v[0].data(), v[1].data(), v[2].data(), y.data(),
                                                     mean.data(), invstd.data(), nullptr, nullptr, 0.0);
      return weighted_sum(y);
    };
    loss(inputs);  // the statistics backward uses
    std::vector<std::vector<double>> analytic{std::vector<double>(y.size()), std::vector<double>(s.channels),
                                              std::vector<double>(s.channels)};
    reference::batch_norm_backward_training<double>(s, inputs[0].data(), r.data(), inputs[1].data(), mean.data(),
                                                    invstd.data(), analytic[0].data(), analytic[1].data(),
                                                    analytic[2].data());
    EXPECT_TRUE(check_gradients(loss, inputs, analytic, options, {"x", "gamma", "beta"}, "batch_norm training").ok);
  }
  {
    SCOPED_TRACE("frozen (running statistics held constant)");
    auto loss = [&](const std::vector<std::vector<double>>& v) {
      reference::batch_norm_forward_inference<double>(s, v[0].data(), v[1].data(), v[2].data(), rm.data(),
                                                      rv.data(), y.data());
      return weighted_sum(y);
    };
    std::vector<std::vector<double>> analytic{std::vector<double>(y.size()), std::vector<double>(s.channels),
                                              std::vector<double>(s.channels)};
    reference::batch_norm_backward_inference<double>(s, inputs[0].data(), r.data(), inputs[1].data(), rm.data(),
                                                     rv.data(), analytic[0].data(), analytic[1].data(),
                                                     analytic[2].data());
    EXPECT_TRUE(check_gradients(loss, inputs, analytic, options, {"x", "gamma", "beta"}, "batch_norm frozen").ok);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, BatchNormReferenceGradients, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// PyTorch's definition worked by hand: one channel holding 1, 2, 3, 4 has mean 2.5,
// biased variance 1.25 (normalisation) and unbiased variance 5/3 (running estimate).
// With momentum 0.1 from running (0, 1): mean 0.9*0 + 0.1*2.5 = 0.25 and
// variance 0.9*1 + 0.1*5/3 = 1.0666...
class BatchNormRunningStatistics : public ::testing::TestWithParam<Backend> {};

TEST_P(BatchNormRunningStatistics, FollowPyTorchDefinition) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const BatchNormSpec s = bn(1, 1, 2, 2);
  auto op = make_batch_norm(backend, s);
  const std::vector<float> xs{1, 2, 3, 4};
  const Tensor x = on_backend(Tensor::from_vector({1, 1, 2, 2}, xs), backend);
  const Tensor gamma = on_backend(Tensor::from_vector({1}, std::vector<float>{1}), backend);
  const Tensor beta = on_backend(Tensor::from_vector({1}, std::vector<float>{0}), backend);
  Tensor rm = on_backend(Tensor::from_vector({1}, std::vector<float>{0}), backend).clone();
  Tensor rv = on_backend(Tensor::from_vector({1}, std::vector<float>{1}), backend).clone();
  Tensor y = on_backend(Tensor::zeros({1, 1, 2, 2}), backend), mean = on_backend(Tensor::zeros({1}), backend),
         invstd = on_backend(Tensor::zeros({1}), backend);
  op->forward_training(x, gamma, beta, y, mean, invstd, &rm, &rv, 0.1f);
  // Single-precision results of a handful of operations: a few ulps.
  EXPECT_NEAR(mean.to_vector()[0], 2.5f, 1e-6f);
  EXPECT_NEAR(invstd.to_vector()[0], 1.0 / std::sqrt(1.25 + 1e-5), 1e-6);
  EXPECT_NEAR(rm.to_vector()[0], 0.25f, 1e-6f);
  EXPECT_NEAR(rv.to_vector()[0], 0.9 + 0.1 * 5.0 / 3.0, 1e-6);
  EXPECT_NEAR(y.to_vector()[0], -1.5 / std::sqrt(1.25 + 1e-5), 1e-5);
}

TEST_P(BatchNormRunningStatistics, RejectsBadSpecsAndArguments) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  EXPECT_THROW(make_batch_norm(backend, bn(1, 0, 2, 2)), Error);
  EXPECT_THROW(make_batch_norm(backend, bn(1, 2, 2, 2, 0.0f)), Error);

  auto single = make_batch_norm(backend, bn(1, 2, 1, 1));  // one value per channel
  const Tensor c2 = on_backend(Tensor::zeros({2}), backend), x1 = on_backend(Tensor::zeros({1, 2, 1, 1}), backend);
  Tensor y1 = x1.clone(), m = c2.clone(), v = c2.clone();
  EXPECT_THROW(single->forward_training(x1, c2, c2, y1, m, v, nullptr, nullptr, 0.1f), Error);
  Tensor yi = x1.clone();
  EXPECT_NO_THROW(single->forward_inference(x1, c2, c2, c2, c2, yi));  // inference is fine with one value

  auto op = make_batch_norm(backend, bn(2, 3, 2, 2));
  const Tensor x = on_backend(Tensor::zeros({2, 3, 2, 2}), backend), c3 = on_backend(Tensor::zeros({3}), backend);
  Tensor y = x.clone(), mean = c3.clone(), invstd = c3.clone(), rm = c3.clone();
  EXPECT_THROW(op->forward_training(x, c3, c3, y, mean, invstd, &rm, nullptr, 0.1f), Error);  // rm without rv
  EXPECT_THROW(op->forward_training(x, c2, c3, y, mean, invstd, nullptr, nullptr, 0.1f), Error);  // gamma shape
  EXPECT_THROW(op->forward_training(x, c3, c3, y, mean, invstd, &rm, &rm, 1.5f), Error);  // momentum
}

INSTANTIATE_TEST_SUITE_P(Backends, BatchNormRunningStatistics, ::testing::ValuesIn(all_backends()),
                         backend_param_name);

}  // namespace
}  // namespace bigtrain::kernels
