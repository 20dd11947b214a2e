// Aggregators against a double-precision oracle written from the formulas, and
// their gradients (features and parameters) against double-precision central
// differences of that oracle.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "kernels/core/error.hpp"
#include "net/aggregator.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::net {
namespace {

using testing::random_doubles;
using testing::to_doubles;

struct Case {
  std::string label;
  AggregatorSpec spec;
};

std::vector<Case> cases() {
  return {{"mean", {AggregatorKind::mean}},
          {"max", {AggregatorKind::max}},
          {"attention_gated", {AggregatorKind::attention, 6, true}},
          {"attention_plain", {AggregatorKind::attention, 6, false}}};
}

// Parameters by their state_dict suffix, as doubles.
using Params = std::map<std::string, std::vector<double>>;

Params params_of(Aggregator& aggregator) {
  Params params;
  for (Parameter* p : aggregator.parameters()) params[p->name.substr(p->name.find('.') + 1)] = to_doubles(p->value);
  return params;
}

// The aggregators' formulas in double: z [D] from H [N, D].
std::vector<double> oracle(const AggregatorSpec& spec, const std::vector<double>& h, std::int64_t n, std::int64_t d,
                           const Params& p, std::vector<double>* attention = nullptr) {
  std::vector<double> z(static_cast<std::size_t>(d), 0.0);
  if (spec.kind == AggregatorKind::mean) {
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < d; ++j) z[j] += h[i * d + j] / static_cast<double>(n);
    return z;
  }
  if (spec.kind == AggregatorKind::max) {
    for (std::int64_t j = 0; j < d; ++j) {
      z[j] = h[j];
      for (std::int64_t i = 1; i < n; ++i) z[j] = std::max(z[j], h[i * d + j]);
    }
    return z;
  }
  const std::int64_t l = spec.hidden;
  const auto& vw = p.at("attention_V.weight");
  const auto& vb = p.at("attention_V.bias");
  const auto& ww = p.at("attention_w.weight");
  std::vector<double> scores(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    double score = 0.0;
    for (std::int64_t k = 0; k < l; ++k) {
      double v = vb[k], u = 0.0;
      for (std::int64_t j = 0; j < d; ++j) v += vw[k * d + j] * h[i * d + j];
      double hidden = std::tanh(v);
      if (spec.gated) {
        u = p.at("attention_U.bias")[k];
        for (std::int64_t j = 0; j < d; ++j) u += p.at("attention_U.weight")[k * d + j] * h[i * d + j];
        hidden *= 1.0 / (1.0 + std::exp(-u));
      }
      score += ww[k] * hidden;
    }
    scores[i] = score;
  }
  const double top = *std::max_element(scores.begin(), scores.end());
  double total = 0.0;
  for (double s : scores) total += std::exp(s - top);
  std::vector<double> a(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) a[i] = std::exp(scores[i] - top) / total;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < d; ++j) z[j] += a[i] * h[i * d + j];
  if (attention) *attention = a;
  return z;
}

class AggregatorTest : public ::testing::TestWithParam<std::tuple<Case, Backend>> {};

TEST_P(AggregatorTest, ForwardMatchesTheFormula) {
  const auto& [c, backend] = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const std::int64_t n = 9, d = 5;
  auto aggregator = make_aggregator(c.spec, d, 42);
  aggregator->to(backend_device(backend));
  const Tensor h = testing::random_tensor({n, d}, 3, -2.0f, 2.0f);
  Tensor z = aggregator->forward(testing::on_backend(h, backend), ForwardContext::inference(backend));
  EXPECT_EQ(z.shape(), (Shape{1, d}));
  std::vector<double> attention;
  const auto expected = oracle(c.spec, to_doubles(h), n, d, params_of(*aggregator), &attention);
  // float32 sums of ~N*L terms of size ~1: a few ulp of the magnitude.
  testing::expect_close(to_doubles(z), expected, {d}, {1e-5, 1e-6}, c.label);
  if (c.spec.kind == AggregatorKind::attention) {
    ASSERT_TRUE(aggregator->attention().defined());
    testing::expect_close(to_doubles(aggregator->attention()), attention, {n}, {1e-5, 1e-7}, "attention weights");
  } else {
    EXPECT_FALSE(aggregator->attention().defined());
  }
  EXPECT_EQ(aggregator->saved_count(), 0u) << "an inference forward must keep nothing";
}

TEST_P(AggregatorTest, GradientsMatchDoubleFiniteDifferences) {
  const auto& [c, backend] = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const std::int64_t n = 7, d = 4;
  auto aggregator = make_aggregator(c.spec, d, 11);
  aggregator->to(backend_device(backend));
  const Tensor h = testing::random_tensor({n, d}, 5, -1.5f, 1.5f);
  const std::vector<double> upstream = random_doubles(static_cast<std::size_t>(d), 9);  // dL/dz, L = c . z

  aggregator->zero_grad();
  aggregator->forward(testing::on_backend(h, backend), ForwardContext::train(backend));
  EXPECT_EQ(aggregator->saved_count(), 1u);
  Tensor dh = aggregator->backward(testing::from_doubles({1, d}, upstream, backend_device(backend)));
  EXPECT_EQ(aggregator->saved_count(), 0u);

  // Inputs of the scalar function: H, then every parameter by name.
  std::vector<std::string> names = {"h"};
  std::vector<std::vector<double>> inputs = {to_doubles(h)}, analytic = {to_doubles(dh)};
  Params params = params_of(*aggregator);
  for (Parameter* p : aggregator->parameters()) {
    names.push_back(p->name);
    inputs.push_back(to_doubles(p->value));
    analytic.push_back(to_doubles(p->grad));
  }
  auto loss = [&](const std::vector<std::vector<double>>& in) {
    Params current;
    for (std::size_t k = 1; k < in.size(); ++k) current[names[k].substr(names[k].find('.') + 1)] = in[k];
    const auto z = oracle(c.spec, in[0], n, d, current);
    double total = 0.0;
    for (std::int64_t j = 0; j < d; ++j) total += upstream[j] * z[j];
    return total;
  };
  testing::GradCheckOptions options;
  // The analytic side is float32 arithmetic on O(1) values: about 1e-6 relative per
  // op, a few ops deep; the double-precision central difference is exact to ~1e-10.
  options.tolerance = {2e-5, 1e-6};
  options.detect_kinks = c.spec.kind == AggregatorKind::max;  // ties between tiles are the max's kinks
  EXPECT_TRUE(testing::check_gradients(loss, inputs, analytic, options, names, c.label).ok);
  if (c.spec.kind == AggregatorKind::attention) EXPECT_EQ(names.size(), c.spec.gated ? 6u : 4u);
}

TEST_P(AggregatorTest, SeveralForwardsBackpropagateInReverseOrder) {
  // The gradient-equivalence test of the trainer holds several images' graphs; the
  // saved stack must hand each backward its own forward.
  const auto& [c, backend] = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const std::int64_t d = 3;
  auto aggregator = make_aggregator(c.spec, d, 4);
  aggregator->to(backend_device(backend));
  const Tensor h1 = testing::random_tensor({4, d}, 21), h2 = testing::random_tensor({6, d}, 22);
  const Tensor dz = testing::random_tensor({1, d}, 23);
  auto ctx = ForwardContext::train(backend);
  aggregator->forward(testing::on_backend(h1, backend), ctx);
  aggregator->forward(testing::on_backend(h2, backend), ctx);
  Tensor dh2 = aggregator->backward(testing::on_backend(dz, backend));
  Tensor dh1 = aggregator->backward(testing::on_backend(dz, backend));
  EXPECT_EQ(dh2.shape(), (Shape{6, d}));
  EXPECT_EQ(dh1.shape(), (Shape{4, d}));
  aggregator->forward(testing::on_backend(h1, backend), ctx);
  Tensor alone = aggregator->backward(testing::on_backend(dz, backend));
  testing::expect_close(to_doubles(dh1), to_doubles(alone), {4, d}, {0, 0}, "same forward, same gradient");
  EXPECT_THROW(aggregator->backward(testing::on_backend(dz, backend)), Error);
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<Case, Backend>>& info) {
  return std::get<0>(info.param).label + "_" + backend_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Kinds, AggregatorTest,
                         ::testing::Combine(::testing::ValuesIn(cases()), ::testing::ValuesIn(testing::all_backends())),
                         case_name);

TEST(Aggregator, DropoutIsSeededAndOnlyInTraining) {
  AggregatorSpec spec{AggregatorKind::mean, 0, true, 0.5f};
  auto aggregator = make_aggregator(spec, 64, 1);
  const Tensor h = testing::random_tensor({3, 64}, 8, 1.0f, 2.0f);  // positive: a dropped value is exactly 0
  const auto inference = to_doubles(aggregator->forward(h, ForwardContext::inference(Backend::cpu)));
  EXPECT_EQ(std::count(inference.begin(), inference.end(), 0.0), 0);
  ForwardContext ctx{.backend = Backend::cpu, .training = true, .dropout_seed = 5, .dropout_offset = 2};
  const auto first = to_doubles(aggregator->forward(h, ctx));
  const auto again = to_doubles(aggregator->forward(h, ctx));
  EXPECT_EQ(first, again) << "pass 2 must redraw pass 1's mask";
  const auto zeros = std::count(first.begin(), first.end(), 0.0);
  EXPECT_GT(zeros, 10);
  EXPECT_LT(zeros, 54);
  for (std::size_t j = 0; j < first.size(); ++j)
    if (first[j] != 0.0) EXPECT_NEAR(first[j], 2.0 * inference[j], 1e-5);  // inverted dropout scales by 1/(1-p)
}

TEST(Aggregator, BadInputsAreClearErrors) {
  auto aggregator = make_aggregator({AggregatorKind::attention, 4}, 8, 1);
  EXPECT_THROW(aggregator->forward(Tensor::zeros({3, 7}), ForwardContext::inference(Backend::cpu)), Error);
  EXPECT_THROW(aggregator->forward(Tensor::zeros({0, 8}), ForwardContext::inference(Backend::cpu)), Error);
  EXPECT_THROW(aggregator->backward(Tensor::zeros({1, 8})), Error);  // nothing kept
  EXPECT_THROW(parse_aggregator_kind("median"), Error);
  EXPECT_EQ(parse_aggregator_kind("max"), AggregatorKind::max);
  EXPECT_THROW(make_aggregator({AggregatorKind::mean}, 0, 1), Error);
}

TEST(Aggregator, AttentionStateNamesFollowIlseEtAl) {
  auto gated = make_aggregator({AggregatorKind::attention, 16, true}, 32, 1);
  std::vector<std::string> names;
  for (Parameter* p : gated->parameters()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"aggregator.attention_V.weight", "aggregator.attention_V.bias",
                                             "aggregator.attention_U.weight", "aggregator.attention_U.bias",
                                             "aggregator.attention_w.weight"}));
  EXPECT_EQ(gated->parameters()[0]->value.shape(), (Shape{16, 32}));
  EXPECT_TRUE(make_aggregator({AggregatorKind::max}, 32, 1)->parameters().empty());
}

}  // namespace
}  // namespace bigtrain::net
