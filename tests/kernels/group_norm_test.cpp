// GroupNorm: every backend against the reference evaluated in double precision on
// the same float inputs; the reference's gradients against finite differences;
// a hand-worked example of PyTorch's definition; and the property the op exists
// for: a sample's output does not depend on the rest of its batch.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/core/error.hpp"
#include "kernels/group_norm.hpp"
#include "kernels/reference/group_norm.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using namespace bigtrain::testing;

struct GnCase {
  std::string name;
  GroupNormSpec spec;
  float offset = 0.0f;  // x ~ offset + spread * U(-1, 1)
  float spread = 1.0f;
};
void PrintTo(const GnCase& c, std::ostream* os) { *os << c.name; }

GroupNormSpec gn(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, std::int64_t groups,
                 float eps = 1e-5f) {
  GroupNormSpec s;
  s.batch = n, s.channels = c, s.height = h, s.width = w, s.groups = groups, s.epsilon = eps;
  return s;
}

const std::vector<GnCase>& cases() {
  static const std::vector<GnCase> table{
      {"n2_c6_g3_odd", gn(2, 6, 5, 7, 3)},
      {"one_group_is_layer_norm", gn(3, 4, 3, 3, 1)},
      {"groups_equal_channels_is_instance_norm", gn(2, 5, 4, 3, 5)},
      {"c32_g8_batch4", gn(4, 32, 6, 6, 8)},
      {"spatial_1x1_two_channels_a_group", gn(5, 8, 1, 1, 4)},
      {"batch1", gn(1, 16, 8, 8, 4)},
      {"groups_longer_than_a_summation_chunk", gn(2, 4, 40, 37, 2)},  // 2960 values a group
      // Mean far from zero: a one-pass E[x^2]-E[x]^2 variance would lose it all.
      {"offset_mean_small_spread", gn(2, 4, 6, 5, 2), 50.0f, 0.5f},
      // Variance far below epsilon: epsilon dominates.
      {"variance_below_eps", gn(2, 4, 4, 4, 2, 1e-3f), 0.2f, 1e-3f},
  };
  return table;
}

// As batch_norm_test.cpp: each statistic sums count = (C/G)*H*W values, so the
// fp32 error grows as sqrt(count)*eps, scaled by how far the mean sits from the
// spread; 16x headroom for the few roundings per element.
Tolerance fp32_tolerance(const GnCase& c) {
  const double eps = std::numeric_limits<float>::epsilon();
  const double count = static_cast<double>(c.spec.group_size());
  const double conditioning = 1.0 + std::abs(c.offset) / c.spread;
  return {16.0 * eps * std::sqrt(count * static_cast<double>(c.spec.batch)) * conditioning, 0.0};
}

struct Inputs {
  Tensor x, gamma, beta, dy;
};

Inputs make_inputs(const GnCase& c) {
  const GroupNormSpec& s = c.spec;
  Inputs in;
  in.x = random_tensor(s.input_shape(), 21, c.offset - c.spread, c.offset + c.spread);
  in.gamma = random_tensor(s.channel_shape(), 22, 0.5f, 1.5f);
  in.beta = random_tensor(s.channel_shape(), 23);
  in.dy = random_tensor(s.input_shape(), 24);
  return in;
}

class GroupNormBackend : public ::testing::TestWithParam<std::tuple<Backend, GnCase>> {
 protected:
  void SetUp() override {
    BT_SKIP_UNLESS_AVAILABLE(backend());
    op_ = make_group_norm(backend(), spec());
    in_ = make_inputs(test_case());
  }
  Backend backend() const { return std::get<0>(GetParam()); }
  const GnCase& test_case() const { return std::get<1>(GetParam()); }
  const GroupNormSpec& spec() const { return test_case().spec; }
  Tensor dev(const Tensor& t) const { return on_backend(t, backend()); }

  std::unique_ptr<GroupNorm> op_;
  Inputs in_;
};

TEST_P(GroupNormBackend, Forward) {
  const GroupNormSpec& s = spec();
  Tensor y = nan_tensor(s.input_shape(), backend()), mean = nan_tensor(s.statistics_shape(), backend()),
         invstd = nan_tensor(s.statistics_shape(), backend());
  op_->forward(dev(in_.x), dev(in_.gamma), dev(in_.beta), y, mean, invstd);
  std::vector<double> y_ref(numel(s.input_shape())), mean_ref(numel(s.statistics_shape())),
      invstd_ref(numel(s.statistics_shape()));
  reference::group_norm_forward<double>(s, to_doubles(in_.x).data(), to_doubles(in_.gamma).data(),
                                        to_doubles(in_.beta).data(), y_ref.data(), mean_ref.data(), invstd_ref.data());
  const Tolerance tol = fp32_tolerance(test_case());
  expect_close(to_doubles(y), y_ref, s.input_shape(), tol, "y");
  expect_close(to_doubles(mean), mean_ref, s.statistics_shape(), tol, "save_mean");
  expect_close(to_doubles(invstd), invstd_ref, s.statistics_shape(), tol, "save_invstd");

  Tensor y2 = nan_tensor(s.input_shape(), backend());
  op_->forward(dev(in_.x), dev(in_.gamma), dev(in_.beta), y2, mean, invstd);
  EXPECT_EQ(y2.to_vector(), y.to_vector()) << "same inputs: bitwise equal (deterministic)";
}

TEST_P(GroupNormBackend, Backward) {
  const GroupNormSpec& s = spec();
  std::vector<double> y_ref(numel(s.input_shape())), mean_d(numel(s.statistics_shape())),
      invstd_d(numel(s.statistics_shape()));
  reference::group_norm_forward<double>(s, to_doubles(in_.x).data(), to_doubles(in_.gamma).data(),
                                        to_doubles(in_.beta).data(), y_ref.data(), mean_d.data(), invstd_d.data());
  const Tensor mean = from_doubles(s.statistics_shape(), mean_d),
               invstd = from_doubles(s.statistics_shape(), invstd_d);
  Tensor dx = nan_tensor(s.input_shape(), backend()), dgamma = nan_tensor(s.channel_shape(), backend()),
         dbeta = nan_tensor(s.channel_shape(), backend());
  op_->backward(dev(in_.x), dev(in_.dy), dev(in_.gamma), dev(mean), dev(invstd), dx, dgamma, dbeta);

  std::vector<double> dx_ref(numel(s.input_shape())), dgamma_ref(s.channels), dbeta_ref(s.channels);
  reference::group_norm_backward<double>(s, to_doubles(in_.x).data(), to_doubles(in_.dy).data(),
                                         to_doubles(in_.gamma).data(), to_doubles(mean).data(),
                                         to_doubles(invstd).data(), dx_ref.data(), dgamma_ref.data(),
                                         dbeta_ref.data());
  const Tolerance tol = fp32_tolerance(test_case());
  // dx cancels to far below its terms (two values a group: ~eps/var of them), so
  // its error is bounded by the terms' size, gamma*invstd*dy, not by dx's.
  double term_scale = 0.0;
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t c = 0; c < s.channels; ++c)
      term_scale = std::max(term_scale, std::abs(in_.gamma.f32()[c] *
                                                 invstd_d[static_cast<std::size_t>(n * s.groups + c / (s.channels / s.groups))]));
  const std::vector<double> dy_values = to_doubles(in_.dy);
  const double dy_rms = std::sqrt(std::inner_product(dy_values.begin(), dy_values.end(), dy_values.begin(), 0.0) /
                                  static_cast<double>(dy_values.size()));
  expect_close(to_doubles(dx), dx_ref, s.input_shape(), {tol.relative, tol.relative * term_scale * dy_rms}, "dx");
  expect_close(to_doubles(dgamma), dgamma_ref, s.channel_shape(), tol, "dgamma");
  expect_close(to_doubles(dbeta), dbeta_ref, s.channel_shape(), tol, "dbeta");
}

std::string backend_case_name(const ::testing::TestParamInfo<std::tuple<Backend, GnCase>>& info) {
  return std::string(backend_name(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Cases, GroupNormBackend,
                         ::testing::Combine(::testing::ValuesIn(all_backends()), ::testing::ValuesIn(cases())),
                         backend_case_name);

// The reference's backward against central differences of sum(y * r), in double.
class GroupNormReferenceGradients : public ::testing::TestWithParam<GnCase> {};

TEST_P(GroupNormReferenceGradients, MatchFiniteDifferences) {
  const GroupNormSpec& s = GetParam().spec;
  const Inputs in = make_inputs(GetParam());
  const std::vector<double> r = random_doubles(numel(s.input_shape()), 27);
  std::vector<std::vector<double>> inputs{to_doubles(in.x), to_doubles(in.gamma), to_doubles(in.beta)};
  std::vector<double> y(numel(s.input_shape())), mean(numel(s.statistics_shape())),
      invstd(numel(s.statistics_shape()));
  auto loss = [&](const std::vector<std::vector<double>>& v) {
    reference::group_norm_forward<double>(s, v[0].data(), v[1].data(), v[2].data(), y.data(), mean.data(),
                                          invstd.data());
    double sum = 0;
    for (std::size_t i = 0; i < y.size(); ++i) sum += y[i] * r[i];
    return sum;
  };
  loss(inputs);  // the statistics backward uses
  std::vector<std::vector<double>> analytic{std::vector<double>(y.size()), std::vector<double>(s.channels),
                                            std::vector<double>(s.channels)};
  reference::group_norm_backward<double>(s, inputs[0].data(), r.data(), inputs[1].data(), mean.data(),
                                         invstd.data(), analytic[0].data(), analytic[1].data(), analytic[2].data());
  GradCheckOptions options;
  // As batch_norm_test.cpp: smooth, step 1e-5 scaled by |x|; an offset of 50
  // scales the truncation error by 2500.
  options.tolerance = {1e-6 * (1.0 + GetParam().offset * GetParam().offset / 100.0), 1e-9};
  options.max_elements_per_input = 48;
  EXPECT_TRUE(check_gradients(loss, inputs, analytic, options, {"x", "gamma", "beta"}, "group_norm").ok);
}

INSTANTIATE_TEST_SUITE_P(Cases, GroupNormReferenceGradients, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

// PyTorch's definition by hand: one sample, two channels in one group holding
// 1, 2 and 3, 4: mean 2.5, biased variance 1.25; gamma (1, 2), beta (0, 1).
class GroupNormDefinition : public ::testing::TestWithParam<Backend> {};

TEST_P(GroupNormDefinition, FollowsPyTorch) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  auto op = make_group_norm(backend, gn(1, 2, 1, 2, 1));
  const Tensor x = on_backend(Tensor::from_vector({1, 2, 1, 2}, std::vector<float>{1, 2, 3, 4}), backend);
  const Tensor gamma = on_backend(Tensor::from_vector({2}, std::vector<float>{1, 2}), backend);
  const Tensor beta = on_backend(Tensor::from_vector({2}, std::vector<float>{0, 1}), backend);
  Tensor y = on_backend(Tensor::zeros({1, 2, 1, 2}), backend), mean = on_backend(Tensor::zeros({1, 1}), backend),
         invstd = on_backend(Tensor::zeros({1, 1}), backend);
  op->forward(x, gamma, beta, y, mean, invstd);
  const double inv = 1.0 / std::sqrt(1.25 + 1e-5);
  EXPECT_NEAR(mean.to_vector()[0], 2.5f, 1e-6f);
  EXPECT_NEAR(invstd.to_vector()[0], inv, 1e-6);
  const std::vector<float> ys = y.to_vector();
  EXPECT_NEAR(ys[0], -1.5 * inv, 1e-5);
  EXPECT_NEAR(ys[3], 2.0 * 1.5 * inv + 1.0, 1e-5);
}

TEST_P(GroupNormDefinition, RejectsBadSpecsAndArguments) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  EXPECT_THROW(make_group_norm(backend, gn(1, 6, 2, 2, 4)), Error);  // 4 groups do not divide 6 channels
  EXPECT_THROW(make_group_norm(backend, gn(1, 6, 2, 2, 0)), Error);
  EXPECT_THROW(make_group_norm(backend, gn(1, 6, 2, 2, 3, 0.0f)), Error);
  auto op = make_group_norm(backend, gn(2, 4, 2, 2, 2));
  const Tensor x = on_backend(Tensor::zeros({2, 4, 2, 2}), backend), c4 = on_backend(Tensor::zeros({4}), backend),
               c3 = on_backend(Tensor::zeros({3}), backend);
  Tensor y = x.clone(), stats = on_backend(Tensor::zeros({2, 2}), backend).clone(),
         wrong_stats = on_backend(Tensor::zeros({4}), backend).clone();
  Tensor stats2 = stats.clone();
  EXPECT_THROW(op->forward(x, c3, c4, y, stats, stats2), Error);                 // gamma shape
  EXPECT_THROW(op->forward(x, c4, c4, y, wrong_stats, stats2), Error);           // statistics per (sample, group)
  EXPECT_NO_THROW(op->forward(x, c4, c4, y, stats, stats2));
}

// The reason GroupNorm is offered: a sample normalised alone or inside any batch
// gives the same output (BatchNorm's batch statistics would not).
TEST_P(GroupNormDefinition, SampleOutputIndependentOfItsBatch) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const GroupNormSpec s = gn(3, 8, 5, 4, 4);
  const Inputs in = make_inputs({"batch3", s});
  auto forward = [&](const GroupNormSpec& spec, const Tensor& x) {
    Tensor y = nan_tensor(spec.input_shape(), backend), mean = nan_tensor(spec.statistics_shape(), backend),
           invstd = nan_tensor(spec.statistics_shape(), backend);
    make_group_norm(backend, spec)->forward(on_backend(x, backend), on_backend(in.gamma, backend),
                                            on_backend(in.beta, backend), y, mean, invstd);
    return y.to_vector();
  };
  const std::vector<float> whole = forward(s, in.x);
  GroupNormSpec single = s;
  single.batch = 1;
  const std::vector<float> alone = forward(single, in.x.slice_rows(2, 3).clone());
  EXPECT_EQ(std::vector<float>(whole.end() - static_cast<std::ptrdiff_t>(alone.size()), whole.end()), alone)
      << "the last sample's output changed with the rest of its batch";
}

INSTANTIATE_TEST_SUITE_P(Backends, GroupNormDefinition, ::testing::ValuesIn(all_backends()), backend_param_name);

}  // namespace
}  // namespace bigtrain::kernels
