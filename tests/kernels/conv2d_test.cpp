// Conv2d: every backend against the reference evaluated in double precision on the
// same float inputs, and the reference's gradients against finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/conv2d.hpp"
#include "kernels/core/error.hpp"
#include "kernels/reference/conv2d.hpp"
#include "tests/support/compute_type.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using namespace bigtrain::testing;

struct ConvCase {
  std::string name;
  Conv2dSpec spec;
};
void PrintTo(const ConvCase& c, std::ostream* os) { *os << c.name; }  // gtest prints the name, not bytes

// Builds a spec from the fields that vary; everything else keeps Conv2dSpec's defaults.
Conv2dSpec conv(std::int64_t n, std::int64_t c, std::int64_t o, std::int64_t h, std::int64_t w, int kh, int kw,
                int stride_h, int stride_w, int pad_h, int pad_w, int dil_h = 1, int dil_w = 1, int groups = 1,
                bool bias = false) {
  Conv2dSpec s;
  s.batch = n, s.in_channels = c, s.out_channels = o, s.in_h = h, s.in_w = w;
  s.kernel_h = kh, s.kernel_w = kw, s.stride_h = stride_h, s.stride_w = stride_w, s.pad_h = pad_h, s.pad_w = pad_w;
  s.dilation_h = dil_h, s.dilation_w = dil_w, s.groups = groups, s.bias = bias;
  return s;
}

const std::vector<ConvCase>& cases() {
  static const std::vector<ConvCase> table{
      {"k3_pad1_bias", conv(2, 3, 4, 7, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, true)},
      {"k3_nopad_batch1", conv(1, 2, 3, 5, 6, 3, 3, 1, 1, 0, 0)},
      {"k3_stride2_pad1_bias", conv(2, 4, 6, 9, 11, 3, 3, 2, 2, 1, 1, 1, 1, 1, true)},
      {"k3_stride3_floors", conv(2, 3, 5, 8, 10, 3, 3, 3, 3, 1, 1)},  // unused bottom/right rows
      {"k1_bias", conv(2, 8, 5, 6, 5, 1, 1, 1, 1, 0, 0, 1, 1, 1, true)},
      {"k1_stride2_downsample", conv(2, 4, 8, 7, 7, 1, 1, 2, 2, 0, 0)},
      {"dilation2", conv(1, 3, 4, 10, 9, 3, 3, 1, 1, 2, 2, 2, 2, 1, true)},
      {"asymmetric_k3x2_dil2x3_stride1x2", conv(2, 3, 4, 9, 12, 3, 2, 1, 2, 1, 0, 2, 3)},
      {"k1x3_pad0x1", conv(2, 5, 3, 4, 7, 1, 3, 1, 1, 0, 1, 1, 1, 1, true)},
      {"groups2_bias", conv(2, 4, 6, 6, 7, 3, 3, 1, 1, 1, 1, 1, 1, 2, true)},
      {"groups3_stride2", conv(1, 6, 9, 9, 8, 3, 3, 2, 2, 1, 1, 1, 1, 3)},
      {"depthwise", conv(2, 6, 6, 8, 7, 3, 3, 1, 1, 1, 1, 1, 1, 6)},
      {"depthwise_multiplier2_stride2_bias", conv(2, 4, 8, 9, 9, 3, 3, 2, 2, 1, 1, 1, 1, 4, true)},
      {"wide32_k3", conv(1, 32, 32, 7, 6, 3, 3, 1, 1, 1, 1)},
      // 512 outputs of 32+ channels: Winograd on AVX-512 CPUs (kernels/cpu/conv_algorithm.hpp).
      {"winograd_k3_bias", conv(8, 32, 48, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, true)},
      {"channels12to20_not_multiple_of_8", conv(2, 12, 20, 6, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, true)},
      {"stem_k7_stride2_pad3", conv(2, 1, 8, 23, 21, 7, 7, 2, 2, 3, 3)},
      {"stem_k7_stride2_rgb_bias", conv(1, 3, 8, 17, 19, 7, 7, 2, 2, 3, 3, 1, 1, 1, true)},
      {"stem_k11_stride4_pad2", conv(2, 1, 8, 47, 45, 11, 11, 4, 4, 2, 2)},
      {"stem_k11_stride4_rgb_bias", conv(1, 3, 4, 39, 35, 11, 11, 4, 4, 2, 2, 1, 1, 1, true)},
      {"kernel_covers_input", conv(3, 4, 2, 3, 3, 3, 3, 1, 1, 0, 0, 1, 1, 1, true)},
      {"single_pixel", conv(1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0)},
  };
  return table;
}

std::string case_name(const ConvCase& c) { return c.name; }

// Worst-case growth of fp32 summation error over K terms is about K*eps*rms(term),
// i.e. sqrt(K)*eps relative to rms(y) ~ sqrt(K)*rms(term) (what expect_close scales
// by); oneDNN's blocked partial sums stay inside that. 8x headroom for the fp32
// rounding of the result and the reorders (exact copies, so they add nothing).
Tolerance fp32_sum_tolerance(std::int64_t terms) {
  const double eps = std::numeric_limits<float>::epsilon();
  return {8.0 * eps * std::sqrt(static_cast<double>(terms)), 0.0};
}

std::vector<double> ref_forward(const Conv2dSpec& s, const std::vector<double>& x, const std::vector<double>& w,
                                const std::vector<double>* b) {
  std::vector<double> y(static_cast<std::size_t>(shape_numel(s.output_shape())));
  reference::conv2d_forward<double>(s, x.data(), w.data(), b ? b->data() : nullptr, y.data());
  return y;
}

class Conv2dBackend : public ::testing::TestWithParam<std::tuple<Backend, ConvCase>> {};

TEST_P(Conv2dBackend, ForwardAndBackwardMatchDoubleReference) {
  const auto& [backend, test_case] = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const Conv2dSpec& s = test_case.spec;
  auto op = make_conv2d(backend, s);

  const Tensor x = random_tensor(s.input_shape(), 1), w = random_tensor(s.weight_shape(), 2),
               b = random_tensor({s.out_channels}, 3), dy = random_tensor(s.output_shape(), 4);
  const std::vector<double> xd = to_doubles(x), wd = to_doubles(w), bd = to_doubles(b), dyd = to_doubles(dy);
  const Tensor xb = on_backend(x, backend), wb = on_backend(w, backend), bb = on_backend(b, backend),
               dyb = on_backend(dy, backend);

  // Each output of the forward pass sums (C/groups)*kh*kw products; a dx element at
  // most O/groups*kh*kw; a dweight element N*out_h*out_w.
  const std::int64_t fwd_terms = s.in_channels / s.groups * s.kernel_h * s.kernel_w + 1;
  const std::int64_t bwd_data_terms = s.out_channels / s.groups * s.kernel_h * s.kernel_w;
  const std::int64_t bwd_weight_terms = s.batch * s.out_h() * s.out_w();

  // Twice, with new weights the second time: the primitives built once must not
  // keep stale data (reordered weights, bound buffers) from the previous call.
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(fmt::format("round {}", round));
    const Tensor w_round = round == 0 ? wb : on_backend(random_tensor(s.weight_shape(), 20), backend);
    const std::vector<double> wd_round = round == 0 ? wd : to_doubles(w_round);

    Tensor y = nan_tensor(s.output_shape(), backend);
    op->forward(xb, w_round, s.bias ? &bb : nullptr, y);
    expect_close(to_doubles(y), ref_forward(s, xd, wd_round, s.bias ? &bd : nullptr), s.output_shape(),
                 fp32_sum_tolerance(fwd_terms), "y");

    Tensor dx = nan_tensor(s.input_shape(), backend);
    op->backward_data(dyb, w_round, dx);
    std::vector<double> dx_expected(xd.size());
    reference::conv2d_backward_data<double>(s, dyd.data(), wd_round.data(), dx_expected.data());
    expect_close(to_doubles(dx), dx_expected, s.input_shape(), fp32_sum_tolerance(bwd_data_terms), "dx");
  }

  Tensor dw = nan_tensor(s.weight_shape(), backend), db = nan_tensor({s.out_channels}, backend);
  op->backward_weights(xb, dyb, dw, s.bias ? &db : nullptr);
  std::vector<double> dw_expected(wd.size()), db_expected(bd.size());
  reference::conv2d_backward_weights<double>(s, xd.data(), dyd.data(), dw_expected.data(), db_expected.data());
  expect_close(to_doubles(dw), dw_expected, s.weight_shape(), fp32_sum_tolerance(bwd_weight_terms), "dweight");
  if (s.bias)
    expect_close(to_doubles(db), db_expected, {s.out_channels}, fp32_sum_tolerance(bwd_weight_terms), "dbias");
}

std::string backend_case_name(const ::testing::TestParamInfo<std::tuple<Backend, ConvCase>>& info) {
  return std::string(backend_name(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Cases, Conv2dBackend, ::testing::Combine(::testing::ValuesIn(all_backends()),
                                                                   ::testing::ValuesIn(cases())),
                         backend_case_name);

// The reference's backward (the oracle for every backend) against central
// differences of loss = sum(y * r), all in double.
class Conv2dReferenceGradients : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2dReferenceGradients, MatchFiniteDifferences) {
  const Conv2dSpec& s = GetParam().spec;
  const std::vector<double> r = random_doubles(static_cast<std::size_t>(shape_numel(s.output_shape())), 9);
  std::vector<std::vector<double>> inputs{random_doubles(static_cast<std::size_t>(shape_numel(s.input_shape())), 6),
                                          random_doubles(static_cast<std::size_t>(shape_numel(s.weight_shape())), 7),
                                          random_doubles(static_cast<std::size_t>(s.out_channels), 8)};
  auto loss = [&](const std::vector<std::vector<double>>& in) {
    const std::vector<double> y = ref_forward(s, in[0], in[1], s.bias ? &in[2] : nullptr);
    double sum = 0;
    for (std::size_t i = 0; i < y.size(); ++i) sum += y[i] * r[i];
    return sum;
  };
  std::vector<std::vector<double>> analytic{std::vector<double>(inputs[0].size()),
                                            std::vector<double>(inputs[1].size()),
                                            std::vector<double>(inputs[2].size())};
  reference::conv2d_backward_data<double>(s, r.data(), inputs[1].data(), analytic[0].data());
  reference::conv2d_backward_weights<double>(s, inputs[0].data(), r.data(), analytic[1].data(),
                                             analytic[2].data());
  if (!s.bias) {
    inputs.pop_back();
    analytic.pop_back();
  }
  GradCheckOptions options;
  // The loss is linear in each input, so central differences have no truncation
  // error; what remains is double rounding of the loss, ~1e-16*|loss|/step (step 1e-5).
  options.tolerance = {1e-8, 1e-10};
  options.max_elements_per_input = 40;  // spread over the tensor, borders included; keeps the test fast
  const GradCheckReport report = check_gradients(loss, inputs, analytic, options, {"x", "weight", "bias"}, s.bias ? "conv2d" : "conv2d (no bias)");
  EXPECT_TRUE(report.ok);
}

INSTANTIATE_TEST_SUITE_P(Cases, Conv2dReferenceGradients, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return case_name(info.param); });

// "Same seed, same result, bit for bit, on the CPU": a fresh object with the same
// spec and inputs reproduces every output exactly (oneDNN partitions its work, and
// so orders its sums, by shape and thread count only).
class Conv2dHostDeterminism : public ::testing::TestWithParam<Backend> {};

TEST_P(Conv2dHostDeterminism, FreshObjectsReproduceOutputsBitwise) {
  const Backend backend = GetParam();
  // Blocked layouts; Winograd; the nhwc stem path.
  for (const char* name : {"wide32_k3", "winograd_k3_bias", "stem_k7_stride2_pad3"}) {
    const ConvCase& c = *std::find_if(cases().begin(), cases().end(), [&](const ConvCase& k) { return k.name == name; });
    SCOPED_TRACE(c.name);
    const Conv2dSpec& s = c.spec;
    const Tensor x = random_tensor(s.input_shape(), 1), w = random_tensor(s.weight_shape(), 2),
                 b = random_tensor({s.out_channels}, 3), dy = random_tensor(s.output_shape(), 4);
    std::vector<std::vector<float>> runs[2];
    for (auto& outputs : runs) {
      auto op = make_conv2d(backend, s);
      Tensor y = Tensor::empty(s.output_shape()), dx = Tensor::empty(s.input_shape()),
             dw = Tensor::empty(s.weight_shape()), db = Tensor::empty({s.out_channels});
      op->forward(x, w, s.bias ? &b : nullptr, y);
      op->backward_data(dy, w, dx);
      op->backward_weights(x, dy, dw, s.bias ? &db : nullptr);
      outputs = {y.to_vector(), dx.to_vector(), dw.to_vector(), s.bias ? db.to_vector() : std::vector<float>{}};
    }
    EXPECT_TRUE(runs[0] == runs[1]) << "outputs differ between two objects built from the same spec";
  }
}

INSTANTIATE_TEST_SUITE_P(HostBackends, Conv2dHostDeterminism, ::testing::Values(Backend::reference, Backend::cpu),
                         backend_param_name);

// Conv2d::backward runs both passes in one call so that a backend converts dy once
// for both (the CPU in bf16, or with dy in another layout than its primitives'):
// its results must be those of the two separate calls, bit for bit, whether dy is
// shared (wide layers) or each pass converts its own (the narrow stem's weight pass
// reads nhwc), with backward-data skipped, and when it adds into the gradients
// (in the CPU's reorder, elsewhere through the dispatcher's axpy).
class Conv2dCombinedBackward : public ::testing::TestWithParam<std::tuple<Backend, DType>> {};

TEST_P(Conv2dCombinedBackward, EqualsTheTwoPassesBitwise) {
  const auto [backend, dtype] = GetParam();
  BT_SKIP_UNLESS_COMPUTES(backend, dtype);
  std::vector<ConvCase> combined;
  for (const char* name : {"wide32_k3", "k1_bias", "k1_stride2_downsample", "groups2_bias", "stem_k7_stride2_pad3"})
    combined.push_back(*std::find_if(cases().begin(), cases().end(), [&](const ConvCase& k) { return k.name == name; }));
  // Wide enough for the CPU's bf16 weight gradient as a matmul on AMX (kernels/cpu/conv_algorithm.hpp).
  combined.push_back({"k1_64to80_bias", conv(2, 64, 80, 5, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1, true)});
  for (const ConvCase& c : combined) {
    for (const Layout layout : {Layout::plain, Layout::blocked16}) {
      Conv2dSpec s = c.spec;
      if (layout != Layout::plain && (backend != Backend::cpu || s.in_channels % 16 || s.out_channels % 16)) continue;
      SCOPED_TRACE(fmt::format("{} {}", c.name, layout == Layout::plain ? "plain" : "nChw16c"));
      s.compute_dtype = dtype;
      s.blocked_outputs = layout != Layout::plain;
      auto op = make_conv2d(backend, s);
      const Tensor x = on_backend(random_tensor(s.input_shape(), 1).to_layout(layout), backend),
                   w = on_backend(random_tensor(s.weight_shape(), 2), backend),
                   dy = on_backend(random_tensor(s.output_shape(), 4).to_layout(layout), backend);
      Tensor* no_bias = nullptr;
      Tensor dx_apart = nan_tensor(s.input_shape(), backend), dw_apart = nan_tensor(s.weight_shape(), backend),
             db_apart = nan_tensor({s.out_channels}, backend);
      op->backward_data(dy, w, dx_apart);
      op->backward_weights(x, dy, dw_apart, s.bias ? &db_apart : no_bias);
      Tensor dx = nan_tensor(s.input_shape(), backend), dw = nan_tensor(s.weight_shape(), backend),
             db = nan_tensor({s.out_channels}, backend);
      op->backward(x, dy, w, &dx, dw, s.bias ? &db : no_bias);
      EXPECT_EQ(dx.to_vector(), dx_apart.to_vector()) << "dx";
      EXPECT_EQ(dw.to_vector(), dw_apart.to_vector()) << "dweight";
      if (s.bias) EXPECT_EQ(db.to_vector(), db_apart.to_vector()) << "dbias";
      Tensor dw_only = nan_tensor(s.weight_shape(), backend);
      op->backward(x, dy, w, nullptr, dw_only, s.bias ? &db : no_bias);
      EXPECT_EQ(dw_only.to_vector(), dw_apart.to_vector()) << "dweight without dx";

      // Accumulating: what the gradients held plus the fresh ones, one float32 add
      // each (as axpy with alpha 1 rounds it), with or without dx.
      const Tensor w_held = random_tensor(s.weight_shape(), 5), b_held = random_tensor({s.out_channels}, 6);
      auto sum = [](const Tensor& held, const Tensor& fresh) {
        std::vector<float> expected = held.to_vector();
        const std::vector<float> added = fresh.to_vector();
        for (std::size_t i = 0; i < expected.size(); ++i) expected[i] += added[i];
        return expected;
      };
      for (const bool with_dx : {true, false}) {
        SCOPED_TRACE(with_dx ? "accumulating, with dx" : "accumulating, without dx");
        Tensor dw_sum = on_backend(w_held.clone(), backend), db_sum = on_backend(b_held.clone(), backend);
        Tensor dx_sum = nan_tensor(s.input_shape(), backend);
        op->backward(x, dy, w, with_dx ? &dx_sum : nullptr, dw_sum, s.bias ? &db_sum : no_bias, true);
        EXPECT_EQ(dw_sum.to_vector(), sum(w_held, dw_apart)) << "dweight";
        if (s.bias) EXPECT_EQ(db_sum.to_vector(), sum(b_held, db_apart)) << "dbias";
        if (with_dx) EXPECT_EQ(dx_sum.to_vector(), dx_apart.to_vector()) << "dx";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Conv2dCombinedBackward,
                         ::testing::Combine(::testing::ValuesIn(all_backends()),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         [](const ::testing::TestParamInfo<std::tuple<Backend, DType>>& info) {
                           return std::string(backend_name(std::get<0>(info.param))) + "_" +
                                  dtype_name(std::get<1>(info.param));
                         });

class Conv2dErrors : public ::testing::TestWithParam<Backend> {};

TEST_P(Conv2dErrors, RejectInconsistentSpecsAndArguments) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  Conv2dSpec bad_groups = conv(1, 6, 4, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1, 4);
  EXPECT_THROW(make_conv2d(backend, bad_groups), Error);
  Conv2dSpec too_small = conv(1, 1, 1, 2, 2, 5, 5, 1, 1, 0, 0);
  EXPECT_THROW(make_conv2d(backend, too_small), Error);
  // 3 pixels short of an 11x11 stride-4 kernel: integer division alone would call it a 1x1 output.
  Conv2dSpec short_by_three = conv(1, 1, 1, 8, 8, 11, 11, 4, 4, 0, 0);
  EXPECT_THROW(make_conv2d(backend, short_by_three), Error);
  Conv2dSpec exactly_one_window = conv(1, 1, 1, 11, 11, 11, 11, 4, 4, 0, 0);
  EXPECT_NO_THROW(make_conv2d(backend, exactly_one_window));
  Conv2dSpec zero_stride = conv(1, 1, 1, 4, 4, 3, 3, 0, 1, 0, 0);
  EXPECT_THROW(make_conv2d(backend, zero_stride), Error);

  const Conv2dSpec s = conv(2, 3, 4, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, true);
  auto op = make_conv2d(backend, s);
  const Tensor x = on_backend(random_tensor(s.input_shape(), 1), backend);
  const Tensor w = on_backend(random_tensor(s.weight_shape(), 2), backend);
  const Tensor b = on_backend(random_tensor({s.out_channels}, 3), backend);
  Tensor y = on_backend(Tensor::zeros(s.output_shape()), backend);
  Tensor wrong_y = on_backend(Tensor::zeros({2, 4, 5, 6}), backend);
  EXPECT_THROW(op->forward(x, w, &b, wrong_y), Error);
  EXPECT_THROW(op->forward(x, w, nullptr, y), Error);  // created with a bias
  EXPECT_THROW(op->forward(w, w, &b, y), Error);
  try {
    op->forward(x, w, &b, wrong_y);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("`y`"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Conv2dErrors, ::testing::ValuesIn(all_backends()), backend_param_name);

}  // namespace
}  // namespace bigtrain::kernels
