// The fused convolution epilogue (ConvEpilogue: BatchNorm with running statistics,
// residual add, ReLU): every backend against the separate layers' arithmetic in
// double, and the reference bit for bit against its own separate ops, which the
// exactness tests of streaming and two-pass training rely on (they compare a fused
// pass with a pass that keeps activations and so runs the layers one by one).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/batch_norm.hpp"
#include "kernels/conv2d.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/reference/conv2d.hpp"
#include "tests/support/error_of.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using namespace bigtrain::testing;

constexpr float kEpsilon = 1e-5f;

Conv2dSpec conv(std::int64_t n, std::int64_t c, std::int64_t o, std::int64_t h, std::int64_t w, int k, int stride,
                int pad, bool bias) {
  Conv2dSpec s;
  s.batch = n, s.in_channels = c, s.out_channels = o, s.in_h = h, s.in_w = w;
  s.kernel_h = s.kernel_w = k, s.stride_h = s.stride_w = stride, s.pad_h = s.pad_w = pad, s.bias = bias;
  return s;
}

struct EpilogueCase {
  std::string name;
  Conv2dSpec spec;
};
void PrintTo(const EpilogueCase& c, std::ostream* os) { *os << c.name; }

// The layer shapes a ResNet fuses: its 3x3 and 1x1 convolutions (blocked layouts on
// the CPU), the 1x1 stride-2 downsample, the grey 7x7 stem (the nhwc / gemm path),
// channel counts off oneDNN's 8/16 blocks, and one output channel (a plain output:
// the residual is copied, not reordered, into it).
const std::vector<EpilogueCase>& cases() {
  static const std::vector<EpilogueCase> table{
      {"k3_wide32", conv(2, 32, 32, 9, 7, 3, 1, 1, false)},
      // Winograd on AVX-512 CPUs, BatchNorm folded into its weights and bias.
      {"k3_winograd", conv(8, 32, 32, 8, 8, 3, 1, 1, false)},
      {"k3_winograd_bias", conv(4, 32, 48, 12, 12, 3, 1, 1, true)},
      {"k3_stride2_bias", conv(2, 16, 24, 11, 9, 3, 2, 1, true)},
      {"k1_bottleneck_expand", conv(2, 16, 64, 6, 5, 1, 1, 0, false)},
      {"k1_stride2_downsample", conv(2, 8, 16, 7, 7, 1, 2, 0, false)},
      {"stem_k7_grey", conv(2, 1, 8, 23, 21, 7, 2, 3, false)},
      {"channels12to20", conv(1, 12, 20, 6, 5, 3, 1, 1, true)},
      {"one_output_channel", conv(2, 4, 1, 6, 6, 3, 1, 1, true)},
  };
  return table;
}

// Every combination a network uses: conv+BN, conv+BN+ReLU, conv+BN+residual+ReLU,
// and the pieces alone.
const std::vector<ConvEpilogue>& epilogues() {
  static const std::vector<ConvEpilogue> table{
      {.batch_norm = true, .bn_epsilon = kEpsilon},
      {.batch_norm = true, .bn_epsilon = kEpsilon, .relu = true},
      {.batch_norm = true, .bn_epsilon = kEpsilon, .residual = true, .relu = true},
      {.residual = true},
      {.relu = true},
  };
  return table;
}

std::string epilogue_name(const ConvEpilogue& e) {
  std::string name = e.batch_norm ? "bn" : "";
  if (e.residual) name += name.empty() ? "add" : "_add";
  if (e.relu) name += name.empty() ? "relu" : "_relu";
  return name;
}

struct EpilogueTensors {
  Tensor gamma, beta, mean, var, residual;
  ConvEpilogueInputs inputs(const ConvEpilogue& e) const {
    ConvEpilogueInputs in;
    if (e.batch_norm) in = {&gamma, &beta, &mean, &var, nullptr};
    if (e.residual) in.residual = &residual;
    return in;
  }
};

// Statistics in the ranges a trained network has: scales around 1, variances
// bounded away from 0, shifts of either sign; the residual of the output's size.
EpilogueTensors make_tensors(const Conv2dSpec& s, std::uint64_t seed, Backend backend) {
  const Shape channels{s.out_channels};
  return {on_backend(random_tensor(channels, seed, 0.5f, 1.5f), backend),
          on_backend(random_tensor(channels, seed + 1, -0.5f, 0.5f), backend),
          on_backend(random_tensor(channels, seed + 2, -0.3f, 0.3f), backend),
          on_backend(random_tensor(channels, seed + 3, 0.3f, 2.0f), backend),
          on_backend(random_tensor(s.output_shape(), seed + 4), backend)};
}

// The separate layers in double: convolution, BatchNorm, add, ReLU.
std::vector<double> expected_output(const Conv2dSpec& s, const ConvEpilogue& e, const Tensor& x, const Tensor& w,
                                    const Tensor* b, const EpilogueTensors& t) {
  std::vector<double> y(numel(s.output_shape()));
  const std::vector<double> xd = to_doubles(x), wd = to_doubles(w);
  const std::vector<double> bd = b ? to_doubles(*b) : std::vector<double>{};
  reference::conv2d_forward<double>(s, xd.data(), wd.data(), b ? bd.data() : nullptr, y.data());
  const std::vector<double> gamma = to_doubles(t.gamma), beta = to_doubles(t.beta), mean = to_doubles(t.mean),
                            var = to_doubles(t.var), residual = to_doubles(t.residual);
  const std::int64_t plane = s.out_h() * s.out_w();
  for (std::size_t i = 0; i < y.size(); ++i) {
    const auto c = static_cast<std::size_t>((static_cast<std::int64_t>(i) / plane) % s.out_channels);
    if (e.batch_norm) y[i] = gamma[c] * (y[i] - mean[c]) / std::sqrt(var[c] + kEpsilon) + beta[c];
    if (e.residual) y[i] += residual[i];
    if (e.relu) y[i] = std::max(y[i], 0.0);
  }
  return y;
}

class ConvEpilogueBackend
    : public ::testing::TestWithParam<std::tuple<Backend, EpilogueCase, ConvEpilogue>> {};

TEST_P(ConvEpilogueBackend, FusedForwardMatchesTheSeparateLayersInDouble) {
  const auto& [backend, test_case, epilogue] = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  Conv2dSpec s = test_case.spec;
  s.epilogue = epilogue;
  auto op = make_conv2d(backend, s);
  const Tensor x = on_backend(random_tensor(s.input_shape(), 1), backend);
  const Tensor b = on_backend(random_tensor({s.out_channels}, 3), backend);
  // Each output sums (C*kh*kw + 1) products; the epilogue adds a few roundings of
  // values of the output's size. The bound of conv2d_test's fp32_sum_tolerance, with
  // twice its headroom for the epilogue's multiply, add and rounding.
  const double terms = static_cast<double>(s.in_channels * s.kernel_h * s.kernel_w + 1);
  const Tolerance tolerance{16.0 * std::numeric_limits<float>::epsilon() * std::sqrt(terms), 0.0};
  // Twice, with new weights and statistics the second time: the op must read them
  // at each call, never keep a folded copy from the first.
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(fmt::format("round {}", round));
    const Tensor w = on_backend(random_tensor(s.weight_shape(), 2 + 10 * round), backend);
    const EpilogueTensors t = make_tensors(s, 100 + 10 * round, backend);
    Tensor y = nan_tensor(s.output_shape(), backend);
    op->forward_fused(x, w, s.bias ? &b : nullptr, t.inputs(epilogue), y);
    expect_close(to_doubles(y), expected_output(s, epilogue, x, w, s.bias ? &b : nullptr, t), s.output_shape(),
                 tolerance, "y");
  }
}

std::string backend_case_name(
    const ::testing::TestParamInfo<std::tuple<Backend, EpilogueCase, ConvEpilogue>>& info) {
  return std::string(backend_name(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name + "_" +
         epilogue_name(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Cases, ConvEpilogueBackend,
                         ::testing::Combine(::testing::ValuesIn(all_backends()), ::testing::ValuesIn(cases()),
                                            ::testing::ValuesIn(epilogues())),
                         backend_case_name);

TEST(ConvEpilogueReference, FusedIsBitIdenticalToTheSeparateOps) {
  for (const EpilogueCase& c : cases()) {
    SCOPED_TRACE(c.name);
    Conv2dSpec s = c.spec;
    s.epilogue = {.batch_norm = true, .bn_epsilon = kEpsilon, .residual = true, .relu = true};
    const Tensor x = random_tensor(s.input_shape(), 1), w = random_tensor(s.weight_shape(), 2),
                 b = random_tensor({s.out_channels}, 3);
    const EpilogueTensors t = make_tensors(s, 7, Backend::reference);
    Tensor fused = Tensor::empty(s.output_shape());
    make_conv2d(Backend::reference, s)->forward_fused(x, w, s.bias ? &b : nullptr, t.inputs(s.epilogue), fused);

    Conv2dSpec plain = c.spec;
    Tensor conv_out = Tensor::empty(s.output_shape()), normalised = Tensor::empty(s.output_shape());
    make_conv2d(Backend::reference, plain)->forward(x, w, s.bias ? &b : nullptr, conv_out);
    const BatchNormSpec bn{s.batch, s.out_channels, s.out_h(), s.out_w(), kEpsilon};
    make_batch_norm(Backend::reference, bn)->forward_inference(conv_out, t.gamma, t.beta, t.mean, t.var, normalised);
    Tensor sum = Tensor::empty(s.output_shape()), layers = Tensor::empty(s.output_shape());
    add(Backend::reference, normalised, t.residual, sum);
    relu_forward(Backend::reference, sum, layers);
    EXPECT_EQ(fused.to_vector(), layers.to_vector());
  }
}

class ConvEpilogueErrors : public ::testing::TestWithParam<Backend> {};

TEST_P(ConvEpilogueErrors, NameTheMisuse) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  Conv2dSpec s = conv(1, 4, 8, 6, 6, 3, 1, 1, false);
  s.epilogue = {.batch_norm = true, .bn_epsilon = kEpsilon, .residual = true, .relu = true};
  auto fused = make_conv2d(backend, s);
  const Tensor x = on_backend(random_tensor(s.input_shape(), 1), backend);
  const Tensor w = on_backend(random_tensor(s.weight_shape(), 2), backend);
  const EpilogueTensors t = make_tensors(s, 3, backend);
  Tensor y = on_backend(Tensor::zeros(s.output_shape()), backend);

  EXPECT_NE(error_of([&] { fused->forward(x, w, nullptr, y); }).find("forward_fused"), std::string::npos);
  EXPECT_NE(error_of([&] { fused->backward_data(y, w, y); }).find("keeps none"), std::string::npos);
  ConvEpilogueInputs without_residual = t.inputs(s.epilogue);
  without_residual.residual = nullptr;
  EXPECT_NE(error_of([&] { fused->forward_fused(x, w, nullptr, without_residual, y); }).find("`residual`"),
            std::string::npos);
  ConvEpilogueInputs into_itself = t.inputs(s.epilogue);
  into_itself.residual = &y;
  EXPECT_NE(error_of([&] { fused->forward_fused(x, w, nullptr, into_itself, y); }).find("must not be the output"),
            std::string::npos);
  const Tensor short_gamma = on_backend(random_tensor({4}, 4), backend);
  ConvEpilogueInputs wrong_gamma = t.inputs(s.epilogue);
  wrong_gamma.gamma = &short_gamma;
  EXPECT_NE(error_of([&] { fused->forward_fused(x, w, nullptr, wrong_gamma, y); }).find("gamma"), std::string::npos);

  auto plain = make_conv2d(backend, conv(1, 4, 8, 6, 6, 3, 1, 1, false));
  EXPECT_NE(error_of([&] { plain->forward_fused(x, w, nullptr, {}, y); }).find("without an epilogue"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Backends, ConvEpilogueErrors, ::testing::ValuesIn(all_backends()), backend_param_name);

}  // namespace
}  // namespace bigtrain::kernels
