// Element-wise ops and dropout: every backend against the reference over sizes on
// both sides of the CPU's parallel threshold, the reference against finite
// differences, and dropout's mask statistics and reproducibility.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include <omp.h>

#include "kernels/core/error.hpp"
#include "kernels/core/philox.hpp"
#include "kernels/elementwise.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using testing::on_backend;
using testing::random_tensor;
using testing::Tolerance;

// Odd sizes, one element, and sizes past the CPU backend's parallel threshold (2^15)
// so both its serial and OpenMP paths run.
const std::int64_t kSizes[] = {1, 7, 1000, 40001, 131075};

Tensor empty_on(const Shape& shape, Backend backend, DType dtype = DType::f32) {
  return Tensor::empty(shape, dtype, backend_device(backend));
}

Tensor to_host(const Tensor& tensor) { return tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu()); }

std::vector<std::uint8_t> bytes_of(const Tensor& mask) {
  const Tensor host = to_host(mask);
  return std::vector<std::uint8_t>(host.data<std::uint8_t>(), host.data<std::uint8_t>() + host.numel());
}

// Single IEEE operations per element (max, add, multiply, select) round the same
// everywhere: these results must be bit-identical to the reference.
constexpr Tolerance kExact{0.0, 0.0};

class ElementwiseBackend : public ::testing::TestWithParam<Backend> {};

TEST_P(ElementwiseBackend, ReluForwardAndBackwardMatchReference) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  for (std::int64_t n : kSizes) {
    SCOPED_TRACE(n);
    const Tensor x = random_tensor({n}, 11 + n), dy = random_tensor({n}, 12 + n);
    x.f32()[0] = 0.0f;  // the kink itself: PyTorch's gradient there is 0
    Tensor y_ref = Tensor::empty({n}), dx_ref = Tensor::empty({n});
    relu_forward(Backend::reference, x, y_ref);
    relu_backward(Backend::reference, y_ref, dy, dx_ref);
    Tensor y = empty_on({n}, backend), dx = empty_on({n}, backend);
    relu_forward(backend, on_backend(x, backend), y);
    relu_backward(backend, y, on_backend(dy, backend), dx);
    testing::expect_close(to_host(y), y_ref, kExact, "relu forward");
    testing::expect_close(to_host(dx), dx_ref, kExact, "relu backward");
    EXPECT_EQ(dx_ref.f32()[0], 0.0f);
    // In place, as layers use it.
    Tensor inplace = on_backend(x, backend).clone();
    relu_forward(backend, inplace, inplace);
    testing::expect_close(to_host(inplace), y_ref, kExact, "relu in place");
  }
}

TEST_P(ElementwiseBackend, ArithmeticMatchesReference) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  for (std::int64_t n : kSizes) {
    SCOPED_TRACE(n);
    const Tensor a = random_tensor({n}, 21 + n), b = random_tensor({n}, 22 + n, -3.0f, 3.0f);
    Tensor sum_ref = Tensor::empty({n});
    add(Backend::reference, a, b, sum_ref);
    Tensor sum = empty_on({n}, backend);
    add(backend, on_backend(a, backend), on_backend(b, backend), sum);
    testing::expect_close(to_host(sum), sum_ref, kExact, "add");
    Tensor aliased = on_backend(a, backend).clone();
    add(backend, aliased, on_backend(b, backend), aliased);
    testing::expect_close(to_host(aliased), sum_ref, kExact, "add into its first operand");

    Tensor axpy_ref = b.clone();
    axpy(Backend::reference, -0.37f, a, axpy_ref);
    Tensor axpy_out = on_backend(b, backend).clone();
    axpy(backend, -0.37f, on_backend(a, backend), axpy_out);
    // A fused multiply-add (which a compiler or GPU may use) rounds once instead of
    // twice: up to half an ulp of the result apart, relative to |y| ~ 1.
    testing::expect_close(to_host(axpy_out), axpy_ref, {1.2e-7, 0.0}, "axpy");

    Tensor scaled_ref = a.clone();
    scale(Backend::reference, 2.5f, scaled_ref);
    Tensor scaled = on_backend(a, backend).clone();
    scale(backend, 2.5f, scaled);
    testing::expect_close(to_host(scaled), scaled_ref, kExact, "scale");
  }
}

TEST_P(ElementwiseBackend, ReductionsMatchReference) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  for (std::int64_t n : kSizes) {
    SCOPED_TRACE(n);
    const Tensor x = random_tensor({n}, 31 + n, -2.0f, 2.0f);
    const double expected = sum_of_squares(Backend::reference, x);
    // Both accumulate exact float squares in double; only the summation order
    // differs, worth a few double ulps per term at most.
    EXPECT_NEAR(sum_of_squares(backend, on_backend(x, backend)), expected, 1e-13 * expected + 1e-300);
    double independent = 0.0;
    for (float v : x.to_vector()) independent += static_cast<double>(v) * v;
    EXPECT_NEAR(expected, independent, 1e-13 * independent);

    EXPECT_TRUE(all_finite(backend, on_backend(x, backend)));
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                      -std::numeric_limits<float>::infinity()}) {
      for (std::int64_t position : {std::int64_t{0}, n / 2, n - 1}) {
        Tensor poisoned = x.clone();
        poisoned.f32()[position] = bad;
        EXPECT_FALSE(all_finite(Backend::reference, poisoned)) << bad << " at " << position;
        EXPECT_FALSE(all_finite(backend, on_backend(poisoned, backend))) << bad << " at " << position;
      }
    }
    Tensor huge = x.clone();
    huge.f32()[n - 1] = std::numeric_limits<float>::max();  // large but finite
    EXPECT_TRUE(all_finite(backend, on_backend(huge, backend)));
  }
}

TEST_P(ElementwiseBackend, DropoutMatchesReferenceBitForBit) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  // Up to 40001: past the parallel threshold, while the per-element reference stays quick.
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{7}, std::int64_t{1000}, std::int64_t{40001}}) {
    for (float p : {0.0f, 0.1f, 0.5f, 0.9f, 1.0f}) {
      // Offsets that are not multiples of 4 start mid Philox block.
      for (std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{3}, (std::uint64_t{1} << 33) + 5}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " p " << p << " offset " << offset);
        const Tensor x = random_tensor({n}, 41 + n), dy = random_tensor({n}, 42 + n);
        Tensor y_ref = Tensor::empty({n}), mask_ref = Tensor::empty({n}, DType::u8), dx_ref = Tensor::empty({n});
        dropout_forward(Backend::reference, x, p, 1234, offset, y_ref, mask_ref);
        dropout_backward(Backend::reference, dy, mask_ref, p, dx_ref);
        Tensor y = empty_on({n}, backend), mask = empty_on({n}, backend, DType::u8), dx = empty_on({n}, backend);
        dropout_forward(backend, on_backend(x, backend), p, 1234, offset, y, mask);
        dropout_backward(backend, on_backend(dy, backend), mask, p, dx);
        EXPECT_EQ(bytes_of(mask), bytes_of(mask_ref));
        testing::expect_close(to_host(y), y_ref, kExact, "dropout forward");
        testing::expect_close(to_host(dx), dx_ref, kExact, "dropout backward");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ElementwiseBackend, ::testing::Values(Backend::cpu, Backend::cuda),
                         testing::backend_param_name);

class DropoutOnEveryBackend : public ::testing::TestWithParam<Backend> {};

TEST_P(DropoutOnEveryBackend, MaskStatisticsScalingAndReproducibility) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const std::int64_t n = 100000;
  const Tensor x = on_backend(random_tensor({n}, 51, 0.5f, 1.5f), backend);
  for (float p : {0.1f, 0.5f, 0.8f}) {
    SCOPED_TRACE(p);
    Tensor y = empty_on({n}, backend), mask = empty_on({n}, backend, DType::u8);
    dropout_forward(backend, x, p, 99, 0, y, mask);
    const std::vector<std::uint8_t> kept = bytes_of(mask);
    const std::vector<float> xs = x.to_vector(), ys = y.to_vector();
    std::int64_t kept_count = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      kept_count += kept[i];
      ASSERT_LE(kept[i], 1);
      // Kept elements are scaled by 1 / (1 - p) (one float multiply), dropped ones are 0.
      ASSERT_EQ(ys[i], kept[i] ? xs[i] * (1.0f / (1.0f - p)) : 0.0f) << i;
    }
    // Binomial(n, 1 - p): allow 5 standard deviations.
    EXPECT_NEAR(static_cast<double>(kept_count), n * (1.0 - p), 5 * std::sqrt(n * p * (1.0 - p)));
    // Neighbouring elements are independent: P(both kept) = (1 - p)^2.
    std::int64_t both = 0;
    for (std::int64_t i = 0; i + 1 < n; i += 2) both += kept[i] & kept[i + 1];
    const double pairs = n / 2, q = (1.0 - p) * (1.0 - p);
    EXPECT_NEAR(static_cast<double>(both), pairs * q, 5 * std::sqrt(pairs * q * (1.0 - q)));

    // Same seed and offset: the same mask (what pass 2 relies on); another seed or
    // offset: a different one.
    Tensor again = empty_on({n}, backend), mask_again = empty_on({n}, backend, DType::u8);
    dropout_forward(backend, x, p, 99, 0, again, mask_again);
    EXPECT_EQ(bytes_of(mask_again), kept);
    EXPECT_EQ(again.to_vector(), ys);
    dropout_forward(backend, x, p, 100, 0, again, mask_again);
    EXPECT_NE(bytes_of(mask_again), kept);
    // A later slice of the stream: element i at offset 1000 draws position 1000 + i.
    Tensor tail = empty_on({n - 1000}, backend), mask_tail = empty_on({n - 1000}, backend, DType::u8);
    dropout_forward(backend, on_backend(x.to(Device::cpu()).slice_rows(1000, n).clone(), backend), p, 99, 1000, tail,
                    mask_tail);
    EXPECT_EQ(bytes_of(mask_tail), std::vector<std::uint8_t>(kept.begin() + 1000, kept.end()));
  }
  // p = 0 is the identity.
  Tensor y = empty_on({n}, backend), mask = empty_on({n}, backend, DType::u8);
  dropout_forward(backend, x, 0.0f, 5, 0, y, mask);
  EXPECT_EQ(y.to_vector(), x.to_vector());
}

INSTANTIATE_TEST_SUITE_P(Backends, DropoutOnEveryBackend, ::testing::ValuesIn(testing::all_backends()),
                         testing::backend_param_name);

// The reference's gradients against central differences of its own forward.
TEST(ElementwiseReference, GradientsMatchFiniteDifferences) {
  const Shape shape{3, 5, 7};
  const std::int64_t n = shape_numel(shape);
  const Tensor weights = random_tensor(shape, 61);  // loss = sum(weights * op(x))
  const std::vector<double> w = testing::to_doubles(weights);
  auto weighted_sum = [&](const Tensor& y) {
    double s = 0.0;
    for (std::int64_t i = 0; i < n; ++i) s += w[i] * y.f32()[i];
    return s;
  };
  testing::GradCheckOptions options;
  // The reference evaluates in float: step 5e-3, and a piecewise-linear function has
  // no truncation error, so what remains is float rounding of ~n terms of size 1
  // divided by the step: ~1e-7 * sqrt(n) / 1e-2 ~ 1e-4 relative to the gradient.
  options.precision = testing::Precision::f32;
  options.tolerance = {1e-3, 1e-5};

  std::vector<std::vector<double>> inputs{testing::to_doubles(random_tensor(shape, 62))};
  // ReLU's kink: elements within two steps of 0 would straddle it; skip them.
  options.skip = [&](std::size_t, std::size_t e) { return std::abs(inputs[0][e]) < 2 * 5e-3; };
  Tensor y = Tensor::empty(shape), dx = Tensor::empty(shape);
  relu_forward(Backend::reference, testing::from_doubles(shape, inputs[0]), y);
  relu_backward(Backend::reference, y, weights, dx);
  auto relu_loss = [&](const std::vector<std::vector<double>>& in) {
    Tensor out = Tensor::empty(shape);
    relu_forward(Backend::reference, testing::from_doubles(shape, in[0]), out);
    return weighted_sum(out);
  };
  EXPECT_TRUE(testing::check_gradients(relu_loss, inputs, {testing::to_doubles(dx)}, options, {"x"}, "relu").ok);

  options.skip = nullptr;
  Tensor mask = Tensor::empty(shape, DType::u8);
  dropout_forward(Backend::reference, testing::from_doubles(shape, inputs[0]), 0.3f, 7, 11, y, mask);
  dropout_backward(Backend::reference, weights, mask, 0.3f, dx);
  auto dropout_loss = [&](const std::vector<std::vector<double>>& in) {
    Tensor out = Tensor::empty(shape), m = Tensor::empty(shape, DType::u8);
    dropout_forward(Backend::reference, testing::from_doubles(shape, in[0]), 0.3f, 7, 11, out, m);
    return weighted_sum(out);
  };
  EXPECT_TRUE(
      testing::check_gradients(dropout_loss, inputs, {testing::to_doubles(dx)}, options, {"x"}, "dropout").ok);
}

// Training is bit-reproducible on the CPU only if reductions do not depend on how
// many threads ran or in which order they finished (sum_of_squares feeds gradient
// clipping).
TEST(ElementwiseCpu, SumOfSquaresIsTheSameBitsForAnyThreadCount) {
  const Tensor x = random_tensor({1 << 20}, 71, -3.0f, 3.0f);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const double serial = sum_of_squares(Backend::cpu, x);
  for (int count : {2, 3, 4}) {
    omp_set_num_threads(count);
    for (int repeat = 0; repeat < 3; ++repeat) EXPECT_EQ(sum_of_squares(Backend::cpu, x), serial) << count;
  }
  omp_set_num_threads(threads);
}

TEST(ElementwiseValidation, BadArgumentsAreClearErrors) {
  const Tensor a = random_tensor({4, 3}, 1), b = random_tensor({3, 4}, 2);
  Tensor out = Tensor::empty({4, 3});
  EXPECT_THROW(add(Backend::cpu, a, b, out), Error);
  Tensor wrong_dtype = Tensor::empty({4, 3}, DType::i32);
  EXPECT_THROW(relu_forward(Backend::cpu, a, wrong_dtype), Error);
  Tensor mask_f32 = Tensor::empty({4, 3});
  EXPECT_THROW(dropout_forward(Backend::cpu, a, 0.5f, 1, 0, out, mask_f32), Error);
  Tensor mask = Tensor::empty({4, 3}, DType::u8);
  EXPECT_THROW(dropout_forward(Backend::cpu, a, 1.5f, 1, 0, out, mask), Error);
  EXPECT_THROW(sum_of_squares(Backend::cpu, Tensor()), Error);
  try {
    add(Backend::cpu, a, b, out);
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("add: argument `b` has shape [3,4], expected [4,3]"), std::string::npos)
        << error.what();
  }
  if (cuda_device_count() == 0) {
    // Host tensors handed to the CUDA backend are refused, never silently copied.
    EXPECT_THROW(relu_forward(Backend::cuda, a, out), Error);
  }
}

}  // namespace
}  // namespace bigtrain::kernels
