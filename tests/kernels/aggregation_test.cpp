// The aggregation ops of every backend against the reference loops, and the
// reference's gradients against double-precision central differences.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/aggregation.hpp"
#include "kernels/core/error.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using testing::on_backend;
using testing::random_tensor;
using testing::to_doubles;

// Outputs of one backend for the same inputs, gathered as doubles.
std::vector<std::vector<double>> run_all(Backend b, const Tensor& h_host, const Tensor& a_host, const Tensor& dz_host,
                                         const Tensor& dh_host) {
  const Tensor h = on_backend(h_host, b), a = on_backend(a_host, b), dz = on_backend(dz_host, b);
  const Tensor dh_up = on_backend(dh_host, b);
  const std::int64_t n = h.dim(0), d = h.dim(1);
  const Device dev = backend_device(b);
  std::vector<std::vector<double>> out;
  Tensor z = Tensor::empty({d}, DType::f32, dev), dh = Tensor::empty({n, d}, DType::f32, dev);
  Tensor argmax = Tensor::empty({d}, DType::i32, dev);
  mean_rows_forward(b, h, z);
  out.push_back(to_doubles(z));
  mean_rows_backward(b, dz, dh);
  out.push_back(to_doubles(dh));
  max_rows_forward(b, h, z, argmax);
  out.push_back(to_doubles(z));
  max_rows_backward(b, dz, argmax, dh);
  out.push_back(to_doubles(dh));
  Tensor y = Tensor::empty({n, d}, DType::f32, dev), dx = Tensor::empty({n, d}, DType::f32, dev);
  tanh_forward(b, h, y);
  out.push_back(to_doubles(y));
  tanh_backward(b, y, dh_up, dx);
  out.push_back(to_doubles(dx));
  sigmoid_forward(b, h, y);
  out.push_back(to_doubles(y));
  sigmoid_backward(b, y, dh_up, dx);
  out.push_back(to_doubles(dx));
  multiply(b, h, dh_up, y);
  out.push_back(to_doubles(y));
  Tensor s = Tensor::empty({n}, DType::f32, dev), ds = Tensor::empty({n}, DType::f32, dev);
  softmax_forward(b, a, s);
  out.push_back(to_doubles(s));
  softmax_backward(b, s, a, ds);
  out.push_back(to_doubles(ds));
  weighted_sum_rows_forward(b, s, h, z);
  out.push_back(to_doubles(z));
  weighted_sum_rows_backward(b, s, h, dz, ds, dh);
  out.push_back(to_doubles(ds));
  out.push_back(to_doubles(dh));
  return out;
}

class AggregationOps : public ::testing::TestWithParam<Backend> {};

TEST_P(AggregationOps, MatchTheReference) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  // 300 x 130 crosses the CPU's parallel threshold, so the threaded path is checked too.
  for (auto [n, d] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {5, 3}, {300, 130}}) {
    const Tensor h = random_tensor({n, d}, 1, -3.0f, 3.0f), a = random_tensor({n}, 2, -20.0f, 20.0f);
    const Tensor dz = random_tensor({d}, 3), dh = random_tensor({n, d}, 4);
    const auto expected = run_all(Backend::reference, h, a, dz, dh);
    const auto actual = run_all(backend, h, a, dz, dh);
    const char* names[] = {"mean",     "mean_backward", "max",      "max_backward",  "tanh",
                           "tanh_bwd", "sigmoid",       "sigm_bwd", "multiply",      "softmax",
                           "softmax_backward", "weighted_sum", "weighted_sum_da", "weighted_sum_dh"};
    for (std::size_t k = 0; k < expected.size(); ++k) {
      // float32 against double-accumulated loops: sums of up to 300 terms, ~1e-6 relative to their magnitude.
      testing::expect_close(actual[k], expected[k], {static_cast<std::int64_t>(expected[k].size())}, {1e-5, 1e-7},
                            fmt::format("{} n={} d={}", names[k], n, d));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, AggregationOps, ::testing::ValuesIn(testing::all_backends()),
                         testing::backend_param_name);

TEST(AggregationOps, SoftmaxOfHugeScoresStaysFinite) {
  const Tensor s = Tensor::from_vector({3}, std::vector<float>{1000.0f, 999.0f, -1000.0f});
  Tensor a = Tensor::empty({3});
  softmax_forward(Backend::cpu, s, a);
  const auto p = a.to_vector();
  EXPECT_NEAR(p[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(p[2], 0.0, 1e-30);
}

TEST(AggregationOps, ReferenceGradientsMatchFiniteDifferences) {
  const std::int64_t n = 5, d = 3;
  std::vector<std::vector<double>> inputs{testing::random_doubles(n * d, 7, -1.0, 1.0),
                                          testing::random_doubles(n, 8, -2.0, 2.0)};
  const auto weights = testing::random_doubles(n * d, 9);  // L = sum w . f(x)
  auto to_tensor = [](const Shape& shape, const std::vector<double>& v) { return testing::from_doubles(shape, v); };
  testing::GradCheckOptions options;
  options.precision = testing::Precision::f32;
  // Central differences of float32 evaluations with a 5e-3 step: ~1e-4 relative error.
  options.tolerance = {2e-3, 1e-4};

  // softmax then weighted sum (the attention pooling) in one scalar function.
  auto pooled = [&](const std::vector<std::vector<double>>& in) {
    Tensor h = to_tensor({n, d}, in[0]), s = to_tensor({n}, in[1]);
    Tensor a = Tensor::empty({n}), z = Tensor::empty({d});
    softmax_forward(Backend::reference, s, a);
    weighted_sum_rows_forward(Backend::reference, a, h, z);
    const auto zs = to_doubles(z);
    double total = 0.0;
    for (std::int64_t j = 0; j < d; ++j) total += weights[j] * zs[j];
    return total;
  };
  Tensor h = to_tensor({n, d}, inputs[0]), s = to_tensor({n}, inputs[1]);
  Tensor a = Tensor::empty({n}), da = Tensor::empty({n}), ds = Tensor::empty({n}), dh = Tensor::empty({n, d});
  softmax_forward(Backend::reference, s, a);
  const Tensor dz = to_tensor({d}, std::vector<double>(weights.begin(), weights.begin() + d));
  weighted_sum_rows_backward(Backend::reference, a, h, dz, da, dh);
  softmax_backward(Backend::reference, a, da, ds);
  EXPECT_TRUE(testing::check_gradients(pooled, inputs, {to_doubles(dh), to_doubles(ds)}, options, {"h", "scores"},
                                       "softmax+weighted_sum")
                  .ok);

  // tanh * sigmoid gate.
  std::vector<std::vector<double>> gate_inputs{inputs[0], testing::random_doubles(n * d, 10, -2.0, 2.0)};
  auto gated = [&](const std::vector<std::vector<double>>& in) {
    Tensor x = to_tensor({n, d}, in[0]), u = to_tensor({n, d}, in[1]);
    Tensor t = Tensor::empty({n, d}), g = Tensor::empty({n, d}), y = Tensor::empty({n, d});
    tanh_forward(Backend::reference, x, t);
    sigmoid_forward(Backend::reference, u, g);
    multiply(Backend::reference, t, g, y);
    const auto ys = to_doubles(y);
    double total = 0.0;
    for (std::size_t i = 0; i < ys.size(); ++i) total += weights[i] * ys[i];
    return total;
  };
  Tensor x = to_tensor({n, d}, gate_inputs[0]), u = to_tensor({n, d}, gate_inputs[1]);
  Tensor t = Tensor::empty({n, d}), g = Tensor::empty({n, d}), dt = Tensor::empty({n, d}), dg = Tensor::empty({n, d});
  tanh_forward(Backend::reference, x, t);
  sigmoid_forward(Backend::reference, u, g);
  const Tensor w = to_tensor({n, d}, weights);
  multiply(Backend::reference, w, g, dt);
  multiply(Backend::reference, w, t, dg);
  tanh_backward(Backend::reference, t, dt, dt);
  sigmoid_backward(Backend::reference, g, dg, dg);
  EXPECT_TRUE(
      testing::check_gradients(gated, gate_inputs, {to_doubles(dt), to_doubles(dg)}, options, {"x", "u"}, "gate").ok);
}

TEST(AggregationOps, BadArgumentsAreClearErrors) {
  Tensor z = Tensor::empty({3}), argmax = Tensor::empty({3}, DType::i32);
  EXPECT_THROW(mean_rows_forward(Backend::cpu, Tensor::empty({4, 2}), z), Error);
  EXPECT_THROW(mean_rows_forward(Backend::cpu, Tensor::empty({0, 3}), z), Error);
  EXPECT_THROW(max_rows_forward(Backend::cpu, Tensor::empty({4, 3}), z, z), Error);  // argmax not i32
  Tensor bad_argmax = Tensor::from_vector({3}, std::vector<float>{0, 0, 0});
  argmax.data<std::int32_t>()[0] = 7;
  argmax.data<std::int32_t>()[1] = argmax.data<std::int32_t>()[2] = 0;
  Tensor dh = Tensor::empty({4, 3});
  EXPECT_THROW(max_rows_backward(Backend::cpu, z, argmax, dh), Error);
  EXPECT_THROW(softmax_forward(Backend::cpu, Tensor::empty({2, 2}), z), Error);
  EXPECT_THROW(weighted_sum_rows_forward(Backend::cpu, Tensor::empty({5}), Tensor::empty({4, 3}), z), Error);
}

}  // namespace
}  // namespace bigtrain::kernels
