// Linear: every backend against the reference evaluated in double precision on the
// same float inputs, and the reference's gradients against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/core/error.hpp"
#include "kernels/linear.hpp"
#include "kernels/reference/linear.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using namespace bigtrain::testing;

struct LinearCase {
  std::string name;
  LinearSpec spec;
};
void PrintTo(const LinearCase& c, std::ostream* os) { *os << c.name; }

LinearSpec lin(std::int64_t batch, std::int64_t in, std::int64_t out, bool bias) {
  LinearSpec s;
  s.batch = batch, s.in_features = in, s.out_features = out, s.bias = bias;
  return s;
}

const std::vector<LinearCase>& cases() {
  static const std::vector<LinearCase> table{
      {"scalar", lin(1, 1, 1, true)},
      {"batch1_no_bias", lin(1, 9, 4, false)},
      {"odd_sizes", lin(3, 17, 5, true)},
      {"one_output", lin(5, 7, 1, false)},
      {"resnet18_head", lin(8, 512, 10, true)},
      {"wide_hidden", lin(4, 64, 130, true)},
      {"attention_gate", lin(37, 32, 16, false)},  // many tiles, small projection
  };
  return table;
}

// Worst-case fp32 summation error over K terms grows as K*eps*rms(term), which is
// sqrt(K)*eps relative to rms(result) ~ sqrt(K)*rms(term), the scale expect_close
// uses. 8x headroom for the final rounding and blocked GEMM partial sums.
Tolerance fp32_sum_tolerance(std::int64_t terms) {
  return {8.0 * std::numeric_limits<float>::epsilon() * std::sqrt(static_cast<double>(terms)), 0.0};
}

class LinearBackend : public ::testing::TestWithParam<std::tuple<Backend, LinearCase>> {};

TEST_P(LinearBackend, ForwardAndBackwardMatchDoubleReference) {
  const auto& [backend, test_case] = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const LinearSpec& s = test_case.spec;
  auto op = make_linear(backend, s);
  const Tensor x = random_tensor(s.input_shape(), 1), b = random_tensor({s.out_features}, 3),
               dy = random_tensor(s.output_shape(), 4);
  const std::vector<double> xd = to_doubles(x), bd = to_doubles(b), dyd = to_doubles(dy);

  // Twice with different weights: the primitives built once must read the new ones.
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(fmt::format("round {}", round));
    const Tensor w = random_tensor(s.weight_shape(), 2 + 100 * static_cast<std::uint64_t>(round));
    const std::vector<double> wd = to_doubles(w);
    Tensor y = nan_tensor(s.output_shape(), backend);
    const Tensor bb = on_backend(b, backend);
    op->forward(on_backend(x, backend), on_backend(w, backend), s.bias ? &bb : nullptr, y);
    std::vector<double> y_ref(numel(s.output_shape()));
    reference::linear_forward<double>(s, xd.data(), wd.data(), s.bias ? bd.data() : nullptr, y_ref.data());
    expect_close(to_doubles(y), y_ref, s.output_shape(), fp32_sum_tolerance(s.in_features + 1), "y");

    Tensor dx = nan_tensor(s.input_shape(), backend);
    op->backward_data(on_backend(dy, backend), on_backend(w, backend), dx);
    std::vector<double> dx_ref(numel(s.input_shape()));
    reference::linear_backward_data<double>(s, dyd.data(), wd.data(), dx_ref.data());
    expect_close(to_doubles(dx), dx_ref, s.input_shape(), fp32_sum_tolerance(s.out_features), "dx");
  }

  Tensor dw = nan_tensor(s.weight_shape(), backend), db = nan_tensor({s.out_features}, backend);
  op->backward_weights(on_backend(x, backend), on_backend(dy, backend), dw, s.bias ? &db : nullptr);
  std::vector<double> dw_ref(numel(s.weight_shape())), db_ref(s.out_features);
  reference::linear_backward_weights<double>(s, xd.data(), dyd.data(), dw_ref.data(), db_ref.data());
  expect_close(to_doubles(dw), dw_ref, s.weight_shape(), fp32_sum_tolerance(s.batch), "dweight");
  if (s.bias) expect_close(to_doubles(db), db_ref, {s.out_features}, fp32_sum_tolerance(s.batch), "dbias");
}

std::string backend_case_name(const ::testing::TestParamInfo<std::tuple<Backend, LinearCase>>& info) {
  return std::string(backend_name(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Cases, LinearBackend,
                         ::testing::Combine(::testing::ValuesIn(all_backends()), ::testing::ValuesIn(cases())),
                         backend_case_name);

// The reference's backward against central differences of sum(y * r), in double.
class LinearReferenceGradients : public ::testing::TestWithParam<LinearCase> {};

TEST_P(LinearReferenceGradients, MatchFiniteDifferences) {
  const LinearSpec& s = GetParam().spec;
  const std::vector<double> r = random_doubles(numel(s.output_shape()), 9);
  std::vector<std::vector<double>> inputs{random_doubles(numel(s.input_shape()), 6),
                                          random_doubles(numel(s.weight_shape()), 7),
                                          random_doubles(static_cast<std::size_t>(s.out_features), 8)};
  std::vector<double> y(numel(s.output_shape()));
  auto loss = [&](const std::vector<std::vector<double>>& in) {
    reference::linear_forward<double>(s, in[0].data(), in[1].data(), s.bias ? in[2].data() : nullptr, y.data());
    double sum = 0;
    for (std::size_t i = 0; i < y.size(); ++i) sum += y[i] * r[i];
    return sum;
  };
  std::vector<std::vector<double>> analytic{std::vector<double>(inputs[0].size()),
                                            std::vector<double>(inputs[1].size()),
                                            std::vector<double>(inputs[2].size())};
  reference::linear_backward_data<double>(s, r.data(), inputs[1].data(), analytic[0].data());
  reference::linear_backward_weights<double>(s, inputs[0].data(), r.data(), analytic[1].data(), analytic[2].data());
  if (!s.bias) inputs.pop_back(), analytic.pop_back();
  GradCheckOptions options;
  // Linear in each input: no truncation error, only double rounding ~1e-16*|loss|/step.
  options.tolerance = {1e-8, 1e-10};
  options.max_elements_per_input = 40;
  EXPECT_TRUE(check_gradients(loss, inputs, analytic, options, {"x", "weight", "bias"}, "linear").ok);
}

INSTANTIATE_TEST_SUITE_P(Cases, LinearReferenceGradients, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

class LinearErrors : public ::testing::TestWithParam<Backend> {};

TEST_P(LinearErrors, RejectBadSpecsAndArguments) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  EXPECT_THROW(make_linear(backend, lin(0, 3, 2, true)), Error);
  EXPECT_THROW(make_linear(backend, lin(2, 3, 0, true)), Error);
  auto op = make_linear(backend, lin(2, 3, 4, true));
  const Tensor x = on_backend(Tensor::zeros({2, 3}), backend), w = on_backend(Tensor::zeros({4, 3}), backend),
               b = on_backend(Tensor::zeros({4}), backend);
  Tensor y = on_backend(Tensor::zeros({2, 4}), backend);
  EXPECT_NO_THROW(op->forward(x, w, &b, y));
  EXPECT_THROW(op->forward(x, w, nullptr, y), Error);  // created with a bias
  EXPECT_THROW(op->forward(x, on_backend(Tensor::zeros({3, 4}), backend), &b, y), Error);  // transposed weight
  Tensor dx = on_backend(Tensor::zeros({2, 4}), backend);
  EXPECT_THROW(op->backward_data(y, w, dx), Error);
}

INSTANTIATE_TEST_SUITE_P(Backends, LinearErrors, ::testing::ValuesIn(all_backends()), backend_param_name);

}  // namespace
}  // namespace bigtrain::kernels
