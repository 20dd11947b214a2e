// Max, average and global average pooling: every backend against the reference
// over a table of shapes, the reference against finite differences (elements near
// max-pool ties skipped), PyTorch's tie rule, and argument errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kernels/core/error.hpp"
#include "kernels/pooling.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using testing::on_backend;
using testing::random_tensor;
using testing::Tolerance;

Pool2dSpec spec_of(PoolKind kind, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, int kh, int kw,
                   int sh, int sw, int ph, int pw, bool count_include_pad = true) {
  Pool2dSpec s;
  s.kind = kind;
  s.batch = n, s.channels = c, s.in_h = h, s.in_w = w;
  s.kernel_h = kh, s.kernel_w = kw, s.stride_h = sh, s.stride_w = sw, s.pad_h = ph, s.pad_w = pw;
  s.count_include_pad = count_include_pad;
  return s;
}

std::string describe(const Pool2dSpec& s) {
  return fmt::format("{} pool {}x{} stride {}x{} pad {}x{}{} on {}", s.kind == PoolKind::max ? "max" : "avg",
                     s.kernel_h, s.kernel_w, s.stride_h, s.stride_w, s.pad_h, s.pad_w,
                     s.kind == PoolKind::average && !s.count_include_pad ? " (pad excluded)" : "",
                     shape_str(s.input_shape()));
}

// Adding a case is one line: odd sizes, stride > 1, padding, overlapping windows
// (stride < kernel), floor dropping the last row/column, batch 1 and > 1.
const std::vector<Pool2dSpec>& cases() {
  static const std::vector<Pool2dSpec> table = {
      spec_of(PoolKind::max, 2, 3, 8, 8, 2, 2, 2, 2, 0, 0),
      spec_of(PoolKind::max, 2, 4, 13, 11, 3, 3, 2, 2, 1, 1),  // ResNet stem's max pool, odd input
      spec_of(PoolKind::max, 1, 5, 9, 9, 3, 3, 1, 1, 1, 1),    // stride 1: every element in up to 9 windows
      spec_of(PoolKind::max, 3, 2, 7, 10, 2, 3, 2, 1, 1, 1),   // asymmetric kernel, stride and padding
      spec_of(PoolKind::max, 2, 3, 10, 10, 3, 3, 3, 3, 0, 0),  // floor drops the last row and column
      spec_of(PoolKind::max, 2, 2, 5, 6, 5, 6, 1, 1, 0, 0),    // one window covering the whole plane
      spec_of(PoolKind::max, 4, 16, 28, 28, 3, 3, 2, 2, 1, 1), // large enough for oneDNN's parallel paths
      spec_of(PoolKind::average, 2, 3, 8, 8, 2, 2, 2, 2, 0, 0),
      spec_of(PoolKind::average, 2, 4, 13, 11, 3, 3, 2, 2, 1, 1, true),
      spec_of(PoolKind::average, 2, 4, 13, 11, 3, 3, 2, 2, 1, 1, false),
      spec_of(PoolKind::average, 1, 3, 9, 9, 3, 3, 1, 1, 1, 1, true),
      spec_of(PoolKind::average, 3, 2, 12, 9, 5, 3, 2, 3, 2, 1, false),
      spec_of(PoolKind::average, 2, 3, 11, 7, 1, 1, 2, 2, 0, 0),  // a strided 1x1 subsample
      spec_of(PoolKind::average, 4, 16, 28, 28, 2, 2, 2, 2, 0, 0),
  };
  return table;
}

Tensor to_host(const Tensor& tensor) { return tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu()); }

Tensor empty_on(const Shape& shape, Backend backend) { return Tensor::empty(shape, DType::f32, backend_device(backend)); }

class PoolBackend : public ::testing::TestWithParam<Backend> {};

TEST_P(PoolBackend, ForwardAndBackwardMatchReference) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  std::uint64_t seed = 100;
  for (const Pool2dSpec& spec : cases()) {
    SCOPED_TRACE(describe(spec));
    const Tensor x = random_tensor(spec.input_shape(), ++seed), dy = random_tensor(spec.output_shape(), ++seed);
    auto reference = make_pool2d(Backend::reference, spec);
    Tensor y_ref = Tensor::empty(spec.output_shape()), dx_ref = Tensor::empty(spec.input_shape());
    const Tensor ws_ref = reference->forward(x, y_ref, true);
    reference->backward(dy, ws_ref, dx_ref);

    auto pool = make_pool2d(backend, spec);
    Tensor y = empty_on(spec.output_shape(), backend), dx = empty_on(spec.input_shape(), backend);
    const Tensor ws = pool->forward(on_backend(x, backend), y, true);
    pool->backward(on_backend(dy, backend), ws, dx);
    // Max selects an input value: exact. Average sums at most 25 values in float
    // against the reference's double sum: a few float ulps relative to the output's size.
    const Tolerance forward_tol = spec.kind == PoolKind::max ? Tolerance{0.0, 0.0} : Tolerance{1e-6, 0.0};
    testing::expect_close(to_host(y), y_ref, forward_tol, "forward");
    // Backward adds up to 9 overlapping windows' gradients in an order of the
    // implementation's choosing: a few float ulps of the gradient's size.
    testing::expect_close(to_host(dx), dx_ref, {1e-6, 0.0}, "backward");

    // Inference computes the same values, without a workspace.
    Tensor y_inference = empty_on(spec.output_shape(), backend);
    const Tensor no_workspace = pool->forward(on_backend(x, backend), y_inference, false);
    EXPECT_FALSE(no_workspace.defined());
    testing::expect_close(to_host(y_inference), y_ref, forward_tol, "inference forward");

    // Objects are reused across calls: a second batch with other values.
    const Tensor x2 = random_tensor(spec.input_shape(), ++seed, -3.0f, 3.0f);
    const Tensor ws2_ref = reference->forward(x2, y_ref, true);
    reference->backward(dy, ws2_ref, dx_ref);
    const Tensor ws2 = pool->forward(on_backend(x2, backend), y, true);
    pool->backward(on_backend(dy, backend), ws2, dx);
    testing::expect_close(to_host(y), y_ref, forward_tol, "forward, second call");
    testing::expect_close(to_host(dx), dx_ref, {1e-6, 0.0}, "backward, second call");
  }
}

// Values drawn from {0, 1, 2} tie in almost every window: the gradient must go to
// the first maximum in row-major window order, as in PyTorch, on every backend.
TEST_P(PoolBackend, MaxPoolTiesPickTheFirstMaximum) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  std::uint64_t seed = 300;
  for (const Pool2dSpec& spec : cases()) {
    if (spec.kind != PoolKind::max) continue;
    SCOPED_TRACE(describe(spec));
    Tensor x = random_tensor(spec.input_shape(), ++seed, 0.0f, 3.0f);
    for (std::int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = std::floor(x.f32()[i]);
    // A distinct gradient per output (integers, so every sum is exact).
    Tensor dy = Tensor::empty(spec.output_shape());
    for (std::int64_t i = 0; i < dy.numel(); ++i) dy.f32()[i] = static_cast<float>(1 + i % 1000);
    auto reference = make_pool2d(Backend::reference, spec);
    Tensor y_ref = Tensor::empty(spec.output_shape()), dx_ref = Tensor::empty(spec.input_shape());
    reference->backward(dy, reference->forward(x, y_ref, true), dx_ref);
    auto pool = make_pool2d(backend, spec);
    Tensor y = empty_on(spec.output_shape(), backend), dx = empty_on(spec.input_shape(), backend);
    pool->backward(on_backend(dy, backend), pool->forward(on_backend(x, backend), y, true), dx);
    testing::expect_close(to_host(dx), dx_ref, {0.0, 0.0}, "backward with ties");
  }
  // The rule itself, on one window: [[1, 2], [2, 0]] sends the gradient to (0, 1).
  const Pool2dSpec one = spec_of(PoolKind::max, 1, 1, 2, 2, 2, 2, 2, 2, 0, 0);
  const std::vector<float> values{1, 2, 2, 0};
  auto pool = make_pool2d(backend, one);
  Tensor y = empty_on({1, 1, 1, 1}, backend), dx = empty_on({1, 1, 2, 2}, backend);
  const std::vector<float> seven{7.0f};
  pool->backward(on_backend(Tensor::from_vector({1, 1, 1, 1}, seven), backend),
                 pool->forward(on_backend(Tensor::from_vector({1, 1, 2, 2}, values), backend), y, true), dx);
  EXPECT_EQ(dx.to_vector(), (std::vector<float>{0, 7, 0, 0}));
}

TEST_P(PoolBackend, GlobalAveragePoolMatchesReference) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const Shape shapes[] = {{1, 1, 1, 1}, {2, 3, 7, 5}, {3, 64, 9, 9}, {8, 512, 7, 7}, {1, 4, 33, 65}};
  std::uint64_t seed = 500;
  for (const Shape& shape : shapes) {
    SCOPED_TRACE(shape_str(shape));
    const Shape pooled{shape[0], shape[1]};
    const Tensor x = random_tensor(shape, ++seed), dy = random_tensor(pooled, ++seed);
    Tensor y_ref = Tensor::empty(pooled), dx_ref = Tensor::empty(shape);
    global_avg_pool_forward(Backend::reference, x, y_ref);
    global_avg_pool_backward(Backend::reference, dy, dx_ref);
    Tensor y = empty_on(pooled, backend), dx = empty_on(shape, backend);
    global_avg_pool_forward(backend, on_backend(x, backend), y);
    global_avg_pool_backward(backend, on_backend(dy, backend), dx);
    // A float sum of up to ~2000 values in [-1, 1] against a double sum: rounding
    // grows with sqrt(count) * ulp of the partial sums, relative to the mean's
    // typical size 1/sqrt(count) after dividing: 1e-5 leaves a wide margin.
    testing::expect_close(to_host(y), y_ref, {1e-5, 0.0}, "global average forward");
    // dy / (H*W) broadcast: one rounding, the same on every backend up to 1 ulp.
    testing::expect_close(to_host(dx), dx_ref, {1.2e-7, 0.0}, "global average backward");
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, PoolBackend, ::testing::Values(Backend::cpu, Backend::cuda),
                         testing::backend_param_name);

// Elements whose window competition is within `margin` of a tie: perturbing them by
// the step could change which element is the maximum, where the function has a kink.
std::vector<bool> near_max_ties(const Pool2dSpec& spec, const std::vector<double>& x, double margin) {
  std::vector<bool> near(x.size(), false);
  for (std::int64_t plane = 0; plane < spec.batch * spec.channels; ++plane) {
    const std::int64_t base = plane * spec.in_h * spec.in_w;
    for (std::int64_t oh = 0; oh < spec.out_h(); ++oh) {
      for (std::int64_t ow = 0; ow < spec.out_w(); ++ow) {
        const std::int64_t h0 = std::max<std::int64_t>(0, oh * spec.stride_h - spec.pad_h);
        const std::int64_t w0 = std::max<std::int64_t>(0, ow * spec.stride_w - spec.pad_w);
        const std::int64_t h1 = std::min(spec.in_h, oh * spec.stride_h - spec.pad_h + spec.kernel_h);
        const std::int64_t w1 = std::min(spec.in_w, ow * spec.stride_w - spec.pad_w + spec.kernel_w);
        double best = -INFINITY;
        for (std::int64_t h = h0; h < h1; ++h)
          for (std::int64_t w = w0; w < w1; ++w) best = std::max(best, x[base + h * spec.in_w + w]);
        std::vector<std::int64_t> contenders;
        for (std::int64_t h = h0; h < h1; ++h)
          for (std::int64_t w = w0; w < w1; ++w)
            if (best - x[base + h * spec.in_w + w] < margin) contenders.push_back(base + h * spec.in_w + w);
        if (contenders.size() > 1)
          for (std::int64_t e : contenders) near[e] = true;
      }
    }
  }
  return near;
}

TEST(PoolReference, GradientsMatchFiniteDifferences) {
  std::uint64_t seed = 700;
  for (const Pool2dSpec& full : cases()) {
    Pool2dSpec spec = full;
    spec.channels = std::min<std::int64_t>(spec.channels, 2);  // keep the O(n^2) check fast
    if (spec.in_h * spec.in_w > 200) continue;
    SCOPED_TRACE(describe(spec));
    const Tensor weights = random_tensor(spec.output_shape(), ++seed);  // loss = sum(weights * pool(x))
    const std::vector<double> w = testing::to_doubles(weights);
    auto pool = make_pool2d(Backend::reference, spec);
    auto loss = [&](const std::vector<std::vector<double>>& in) {
      Tensor y = Tensor::empty(spec.output_shape());
      pool->forward(testing::from_doubles(spec.input_shape(), in[0]), y, false);
      double s = 0.0;
      for (std::size_t i = 0; i < w.size(); ++i) s += w[i] * y.f32()[i];
      return s;
    };
    std::vector<std::vector<double>> inputs{testing::to_doubles(random_tensor(spec.input_shape(), ++seed))};
    Tensor y = Tensor::empty(spec.output_shape()), dx = Tensor::empty(spec.input_shape());
    pool->backward(weights, pool->forward(testing::from_doubles(spec.input_shape(), inputs[0]), y, true), dx);

    testing::GradCheckOptions options;
    // The reference evaluates in float (step 5e-3). Pooling is piecewise linear, so
    // central differences have no truncation error; float rounding of the weighted
    // sum (~1e-7 * sqrt(outputs)) over the step leaves ~1e-4 of the gradient's size.
    options.precision = testing::Precision::f32;
    options.tolerance = {1e-3, 1e-5};
    if (spec.kind == PoolKind::max) {
      // Two steps (x +- h moves two values by up to 2h apart), plus float slack.
      const std::vector<bool> near = near_max_ties(spec, inputs[0], 2.5 * 5e-3);
      options.skip = [near](std::size_t, std::size_t e) { return near[e]; };
    }
    EXPECT_TRUE(testing::check_gradients(loss, inputs, {testing::to_doubles(dx)}, options, {"x"}, describe(spec)).ok);
  }
}

TEST(PoolReference, GlobalAveragePoolGradientMatchesFiniteDifferences) {
  const Shape shape{2, 3, 5, 4};
  const Tensor weights = random_tensor({2, 3}, 801);
  const std::vector<double> w = testing::to_doubles(weights);
  auto loss = [&](const std::vector<std::vector<double>>& in) {
    Tensor y = Tensor::empty({2, 3});
    global_avg_pool_forward(Backend::reference, testing::from_doubles(shape, in[0]), y);
    double s = 0.0;
    for (std::size_t i = 0; i < w.size(); ++i) s += w[i] * y.f32()[i];
    return s;
  };
  std::vector<std::vector<double>> inputs{testing::to_doubles(random_tensor(shape, 802))};
  Tensor dx = Tensor::empty(shape);
  global_avg_pool_backward(Backend::reference, weights, dx);
  testing::GradCheckOptions options;
  options.precision = testing::Precision::f32;
  options.tolerance = {1e-3, 1e-5};  // linear function evaluated in float: rounding / step only
  EXPECT_TRUE(testing::check_gradients(loss, inputs, {testing::to_doubles(dx)}, options, {"x"}, "global avg").ok);
}

TEST(PoolValidation, BadSpecsAndArgumentsAreClearErrors) {
  for (Backend backend : {Backend::reference, Backend::cpu}) {
    SCOPED_TRACE(backend_name(backend));
    EXPECT_THROW(make_pool2d(backend, spec_of(PoolKind::max, 1, 1, 8, 8, 3, 3, 1, 1, 2, 2)), Error);  // pad > k/2
    EXPECT_THROW(make_pool2d(backend, spec_of(PoolKind::max, 1, 1, 2, 2, 5, 5, 1, 1, 1, 1)), Error);  // k > input
    EXPECT_THROW(make_pool2d(backend, spec_of(PoolKind::average, 1, 1, 8, 8, 2, 2, 0, 2, 0, 0)), Error);  // stride 0
    const Pool2dSpec spec = spec_of(PoolKind::max, 2, 3, 8, 8, 2, 2, 2, 2, 0, 0);
    auto pool = make_pool2d(backend, spec);
    Tensor y = Tensor::empty(spec.output_shape()), dx = Tensor::empty(spec.input_shape());
    Tensor wrong = Tensor::empty({2, 3, 8, 9});
    try {
      pool->forward(wrong, y, true);
      ADD_FAILURE() << "expected an error for a wrongly shaped input";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("pool2d forward: argument `x` has shape [2,3,8,9], expected [2,3,8,8]"),
                std::string::npos)
          << error.what();
    }
    const Tensor dy = random_tensor(spec.output_shape(), 1);
    EXPECT_THROW(pool->backward(dy, Tensor(), dx), Error);  // max backward needs the workspace
    // A workspace from the other backend is refused, not misread.
    const Backend other = backend == Backend::cpu ? Backend::reference : Backend::cpu;
    auto other_pool = make_pool2d(other, spec);
    const Tensor foreign = other_pool->forward(random_tensor(spec.input_shape(), 2), y, true);
    EXPECT_THROW(pool->backward(dy, foreign, dx), Error);
  }
  if (!cuda_compiled()) {
    try {
      make_pool2d(Backend::cuda, spec_of(PoolKind::max, 1, 1, 4, 4, 2, 2, 2, 2, 0, 0));
      ADD_FAILURE() << "expected an error";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("no CUDA backend"), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace bigtrain::kernels
