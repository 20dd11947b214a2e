// Mixed precision (train.precision bf16/fp16): the rounding that defines it, the
// reference backend that applies it to conv2d and linear (the oracle), and every
// backend against that oracle (CUDA on a GPU, the CPU's oneDNN in bf16 where the CPU
// has AVX512_BF16; elsewhere the CPU backend refuses clearly).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/conv2d.hpp"
#include "kernels/core/error.hpp"
#include "kernels/cpu/isa.hpp"
#include "kernels/linear.hpp"
#include "kernels/reference/conv2d.hpp"
#include "kernels/reference/linear.hpp"
#include "kernels/reference/round_to_dtype.hpp"
#include "tests/support/compute_type.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using namespace bigtrain::testing;

float from_bits(std::uint32_t bits) { return std::bit_cast<float>(bits); }

// ---- rounding ----------------------------------------------------------------

TEST(RoundToDtype, Float16KnownEncodings) {
  // Encodings from the IEEE 754 binary16 layout: sign | 5-bit exponent (bias 15) | 10-bit fraction.
  EXPECT_EQ(float_to_f16_bits(0.0f), 0x0000);
  EXPECT_EQ(float_to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_f16_bits(1.0f), 0x3C00);
  EXPECT_EQ(float_to_f16_bits(-2.0f), 0xC000);
  EXPECT_EQ(float_to_f16_bits(65504.0f), 0x7BFF);            // the largest finite
  EXPECT_EQ(float_to_f16_bits(65519.0f), 0x7BFF);            // below the midpoint to 2^16
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7C00);            // the midpoint: ties to even = inf
  EXPECT_EQ(float_to_f16_bits(1e6f), 0x7C00);                // overflow -> +inf, as the hardware
  EXPECT_EQ(float_to_f16_bits(-1e6f), 0xFC00);
  EXPECT_EQ(float_to_f16_bits(INFINITY), 0x7C00);
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1.0f, -25)), 0x0000);  // half of it: tie to even 0
  EXPECT_EQ(float_to_f16_bits(std::ldexp(3.0f, -26)), 0x0001);  // 0.75 units: up
  EXPECT_EQ(float_to_f16_bits(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie to even 2
  EXPECT_EQ(float_to_f16_bits(std::ldexp(5.0f, -25)), 0x0002);  // 2.5 units: tie to even 2
  EXPECT_EQ(float_to_f16_bits(std::ldexp(1023.5f, -24)), 0x0400);  // the largest subnormal's tie: up to the normal
  EXPECT_EQ(float_to_f16_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie between 1 and 1+2^-10: even
  EXPECT_EQ(float_to_f16_bits(1.0f + std::ldexp(3.0f, -11)), 0x3C02);  // tie between 1+2^-10 and 1+2^-9: even
  EXPECT_EQ(float_to_f16_bits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);  // past the tie
  EXPECT_TRUE(std::isnan(f16_bits_to_float(float_to_f16_bits(NAN))));
  EXPECT_EQ(f16_bits_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(f16_bits_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_bits_to_float(0xC000), -2.0f);
}

TEST(RoundToDtype, BFloat16KnownEncodings) {
  // bfloat16 is the upper half of a float32: the lower 16 bits round away.
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16_bits(-2.0f), 0xC000);
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3F808000u)), 0x3F80);  // tie, kept part even: down
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3F818000u)), 0x3F82);  // tie, kept part odd: up
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3F808001u)), 0x3F81);  // past the tie: up
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x3F807FFFu)), 0x3F80);  // below the tie: down
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x00018000u)), 0x0002);  // float32 subnormal, tie to even up
  EXPECT_EQ(float_to_bf16_bits(std::numeric_limits<float>::max()), 0x7F80);  // rounds past the largest: inf
  EXPECT_EQ(float_to_bf16_bits(from_bits(0x7F7F7FFFu)), 0x7F7F);  // just below that tie: the largest finite
  EXPECT_EQ(float_to_bf16_bits(-INFINITY), 0xFF80);
  const std::uint16_t nan = float_to_bf16_bits(from_bits(0x7F800001u));  // a signalling NaN whose payload is below bit 16
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(nan))) << std::hex << nan;
  EXPECT_EQ(bf16_bits_to_float(0x3F80), 1.0f);
}

// Every finite float16 value, and the midpoints between neighbours, against the
// definition: a representable value rounds to itself; a midpoint to the neighbour
// with the even fraction; just off the midpoint to the nearer one. The values are
// built with ldexp from the bit fields, independently of f16_bits_to_float.
TEST(RoundToDtype, Float16EveryValueAndMidpoint) {
  auto value_of = [](int h) {  // positive finite encodings only
    const int exponent = h >> 10, fraction = h & 0x3FF;
    return exponent == 0 ? std::ldexp(static_cast<double>(fraction), -24)
                         : std::ldexp(static_cast<double>(1024 + fraction), exponent - 25);
  };
  int failures = 0;
  for (int h = 0; h < 0x7BFF && failures < 5; ++h) {
    const double lo = value_of(h), hi = value_of(h + 1), mid = 0.5 * (lo + hi);
    const int even = (h % 2 == 0) ? h : h + 1;
    auto check = [&](double v, int expected) {
      const float f = static_cast<float>(v);
      ASSERT_EQ(static_cast<double>(f), v) << "test value not exact in float32";
      if (float_to_f16_bits(f) != expected || float_to_f16_bits(-f) != (expected | 0x8000)) {
        ++failures;
        ADD_FAILURE() << "value " << v << " (between encodings " << h << " and " << h + 1 << ") gave "
                      << float_to_f16_bits(f) << ", expected " << expected;
      }
    };
    check(lo, h);
    check(mid, even);
    check(mid - (hi - lo) / 1024.0, h);
    check(mid + (hi - lo) / 1024.0, h + 1);
    EXPECT_EQ(static_cast<double>(f16_bits_to_float(static_cast<std::uint16_t>(h))), lo);
  }
}

// The same for bfloat16 over a spread of the float32 range: the encoding is the
// upper half of the float's bits, so any float with lower half l rounds to the
// upper half u (l < 0x8000), u + 1 (l > 0x8000), or the even of the two (l == 0x8000).
TEST(RoundToDtype, BFloat16LowerHalfDecidesAsDefined) {
  for (std::uint32_t upper = 0; upper < 0x7F80; upper += 37) {
    for (std::uint32_t lower : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
      const std::uint32_t expected = lower < 0x8000u ? upper : lower > 0x8000u ? upper + 1 : upper + (upper & 1u);
      ASSERT_EQ(float_to_bf16_bits(from_bits((upper << 16) | lower)), expected) << std::hex << upper << " " << lower;
      ASSERT_EQ(float_to_bf16_bits(from_bits(0x80000000u | (upper << 16) | lower)), expected | 0x8000u);
    }
  }
}

#if defined(__FLT16_MAX__)
// GCC's _Float16 conversion (libgcc's soft-float, IEEE round to nearest even) as an
// independent implementation, over random floats of every magnitude.
TEST(RoundToDtype, Float16AgreesWithTheCompilersConversion) {
  Random random(7);
  for (int i = 0; i < 200000; ++i) {
    // Exponents from float32 subnormals to overflow; random fraction and sign.
    const auto bits = static_cast<std::uint32_t>(random.next_u64());
    const std::uint32_t exponent = 90 + (bits >> 8) % 60;  // 2^-37 .. 2^22
    const float f = from_bits((bits & 0x807FFFFFu) | (exponent << 23));
    const _Float16 h = static_cast<_Float16>(f);
    std::uint16_t expected;
    std::memcpy(&expected, &h, 2);
    ASSERT_EQ(float_to_f16_bits(f), expected) << f;
  }
}
#endif

TEST(RoundToDtype, OnlyComputeTypesAreAccepted) {
  EXPECT_EQ(round_to_dtype(0.1f, DType::f32), 0.1f);
  EXPECT_THROW(round_to_dtype(0.1f, DType::i32), Error);
}

// ---- the reference with a compute type ---------------------------------------------

double unit_roundoff(DType dtype) { return dtype == DType::bf16 ? 0x1p-8 : 0x1p-11; }

std::vector<double> rounded_doubles(const Tensor& t, DType dtype) {
  std::vector<double> out;
  for (float v : t.to_vector()) out.push_back(round_to_dtype(v, dtype));
  return out;
}
std::vector<double> absolute(std::vector<double> v) {
  for (double& x : v) x = std::abs(x);
  return v;
}

Conv2dSpec mixed_conv(DType dtype) {
  Conv2dSpec s;
  s.batch = 2, s.in_channels = 5, s.out_channels = 6, s.in_h = 9, s.in_w = 8;
  s.kernel_h = s.kernel_w = 3, s.stride_h = 2, s.stride_w = 1, s.pad_h = s.pad_w = 1, s.bias = true;
  s.compute_dtype = dtype;
  return s;
}
// A pointwise layer (1x1, stride 1) of 64x72 channels: the CPU computes its weight
// gradient in bf16 as a matmul on AMX (kernels/cpu/conv_algorithm.hpp), not with the
// convolution's kernel.
Conv2dSpec mixed_pointwise_conv(DType dtype) {
  Conv2dSpec s;
  s.batch = 3, s.in_channels = 64, s.out_channels = 72, s.in_h = 5, s.in_w = 6, s.bias = true;
  s.compute_dtype = dtype;
  return s;
}
LinearSpec mixed_linear(DType dtype) {
  LinearSpec s;
  s.batch = 3, s.in_features = 70, s.out_features = 9, s.bias = true;
  s.compute_dtype = dtype;
  return s;
}

// One op's double-precision loops (kernels/reference): the oracle, for conv2d and
// linear alike.
template <typename Spec>
struct DoubleOracle {
  void (*forward)(const Spec&, const double* x, const double* w, const double* b, double* y);
  void (*backward_data)(const Spec&, const double* dy, const double* w, double* dx);
  void (*backward_weights)(const Spec&, const double* x, const double* dy, double* dw, double* db);
};
const DoubleOracle<Conv2dSpec> kConv2dOracle{reference::conv2d_forward<double>, reference::conv2d_backward_data<double>,
                                             reference::conv2d_backward_weights<double>};
const DoubleOracle<LinearSpec> kLinearOracle{reference::linear_forward<double>, reference::linear_backward_data<double>,
                                             reference::linear_backward_weights<double>};

struct OpResults {
  std::vector<double> y, dx, dw, db;
};

// The oracle on operands rounded to `dtype` first. dbias sums the float32 gradient,
// unrounded (as cuDNN's backward-bias does).
template <typename Spec>
OpResults oracle_on_rounded_operands(const Spec& s, const DoubleOracle<Spec>& oracle, DType dtype, const Tensor& x,
                                     const Tensor& w, const Tensor& b, const Tensor& dy) {
  const std::vector<double> xr = rounded_doubles(x, dtype), wr = rounded_doubles(w, dtype),
                            dyr = rounded_doubles(dy, dtype), bd = to_doubles(b), dyd = to_doubles(dy);
  OpResults expected{std::vector<double>(static_cast<std::size_t>(shape_numel(s.output_shape()))),
                     std::vector<double>(xr.size()), std::vector<double>(wr.size()), std::vector<double>(bd.size())};
  std::vector<double> unused(wr.size());
  oracle.forward(s, xr.data(), wr.data(), bd.data(), expected.y.data());
  oracle.backward_data(s, dyr.data(), wr.data(), expected.dx.data());
  oracle.backward_weights(s, xr.data(), dyr.data(), expected.dw.data(), nullptr);
  oracle.backward_weights(s, xr.data(), dyd.data(), unused.data(), expected.db.data());
  return expected;
}

// y, dx, dweight and dbias of `op` on `backend`, from host inputs.
template <typename Op>
OpResults run_on_backend(Op& op, Backend backend, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& dy,
                         const Shape& y_shape) {
  Tensor y = on_backend(Tensor::zeros(y_shape), backend), dx = on_backend(Tensor::zeros(x.shape()), backend),
         dw = on_backend(Tensor::zeros(w.shape()), backend), db = on_backend(Tensor::zeros(b.shape()), backend);
  const Tensor xb = on_backend(x, backend), wb = on_backend(w, backend), bb = on_backend(b, backend),
               dyb = on_backend(dy, backend);
  op.forward(xb, wb, &bb, y);
  op.backward_data(dyb, wb, dx);
  op.backward_weights(xb, dyb, dw, &db);
  return {to_doubles(y), to_doubles(dx), to_doubles(dw), to_doubles(db)};
}

class MixedReference : public ::testing::TestWithParam<DType> {};

// Exactly the double-precision oracle on inputs rounded first (up to the final
// float32 store, 2^-24 relative), and within the rounding's own bound of the plain
// float32 result: each product x*w of rounded operands is within (2u + u^2)|x w| of
// the exact one, so |y16 - y32| <= (2u + u^2) * sum |x||w| per element (plus the
// float32 stores of both), where u is the type's unit roundoff.
// The inputs are drawn with seeds first_seed .. first_seed + 3.
template <typename Spec, typename MakeOp>
void expect_double_oracle_on_rounded_operands(const Spec& s, std::int64_t outputs, MakeOp make_op,
                                              const DoubleOracle<Spec>& oracle, std::uint64_t first_seed) {
  const DType dtype = s.compute_dtype;
  Spec plain = s;
  plain.compute_dtype = DType::f32;
  const Tensor x = random_tensor(s.input_shape(), first_seed), w = random_tensor(s.weight_shape(), first_seed + 1),
               b = random_tensor({outputs}, first_seed + 2), dy = random_tensor(s.output_shape(), first_seed + 3);
  auto mixed = make_op(Backend::reference, s), full = make_op(Backend::reference, plain);
  const OpResults actual = run_on_backend(*mixed, Backend::reference, x, w, b, dy, s.output_shape());
  Tensor y32 = Tensor::zeros(s.output_shape());
  full->forward(x, w, &b, y32);

  const OpResults expected = oracle_on_rounded_operands(s, oracle, dtype, x, w, b, dy);
  expect_close(actual.y, expected.y, s.output_shape(), {1e-6, 0.0}, "y vs oracle on rounded operands");
  std::vector<double> bound(expected.y.size());
  const std::vector<double> xa = absolute(to_doubles(x)), wa = absolute(to_doubles(w));
  oracle.forward(s, xa.data(), wa.data(), nullptr, bound.data());
  const double u = unit_roundoff(dtype);
  const std::vector<double>& yd = actual.y;
  const std::vector<double> y32d = to_doubles(y32);
  int differing = 0;
  for (std::size_t i = 0; i < yd.size(); ++i) {
    EXPECT_LE(std::abs(yd[i] - y32d[i]), (2 * u + u * u) * bound[i] + 4e-7 * (std::abs(y32d[i]) + 1)) << i;
    differing += yd[i] != y32d[i];
  }
  EXPECT_GT(differing, 0) << "rounding to " << dtype_name(dtype) << " changed nothing: it was not applied";

  expect_close(actual.dx, expected.dx, s.input_shape(), {1e-6, 0.0}, "dx");
  expect_close(actual.dw, expected.dw, s.weight_shape(), {1e-6, 0.0}, "dweight");
  expect_close(actual.db, expected.db, {outputs}, {1e-6, 0.0}, "dbias");
}

TEST_P(MixedReference, Conv2dIsTheDoubleOracleOnRoundedOperands) {
  const Conv2dSpec s = mixed_conv(GetParam());
  expect_double_oracle_on_rounded_operands(s, s.out_channels, make_conv2d, kConv2dOracle, 11);
}

TEST_P(MixedReference, LinearIsTheDoubleOracleOnRoundedOperands) {
  const LinearSpec s = mixed_linear(GetParam());
  expect_double_oracle_on_rounded_operands(s, s.out_features, make_linear, kLinearOracle, 21);
}

std::string dtype_param_name(const ::testing::TestParamInfo<DType>& info) { return dtype_name(info.param); }
INSTANTIATE_TEST_SUITE_P(ComputeTypes, MixedReference, ::testing::Values(DType::bf16, DType::f16), dtype_param_name);

TEST(MixedPrecisionSpec, OnlyFloatComputeTypesAreValid) {
  Conv2dSpec conv = mixed_conv(DType::i32);
  EXPECT_THROW(make_conv2d(Backend::reference, conv), Error);
  LinearSpec linear = mixed_linear(DType::u8);
  EXPECT_THROW(make_linear(Backend::reference, linear), Error);
}

// float16 on the CPU, and bf16 where the CPU lacks AVX512_BF16, are errors naming
// the setting and (for bf16) the missing instruction set; bf16 where it has them is
// accepted (MixedBackend.cpu_bf16 checks the results). tests/cli/cpu_bf16_refused.sh
// caps oneDNN's ISA to see the refusal on a CPU that has them.
TEST(MixedPrecisionSpec, TheCpuBackendRefusesWhatItCannotCompute) {
  auto refusal = [](auto make) -> std::string {
    try {
      make();
    } catch (const Error& e) {
      return e.what();
    }
    return {};
  };
  for (DType dtype : {DType::bf16, DType::f16}) {
    const std::string conv = refusal([&] { make_conv2d(Backend::cpu, mixed_conv(dtype)); });
    const std::string linear = refusal([&] { make_linear(Backend::cpu, mixed_linear(dtype)); });
    if (supports(Op::conv2d, Backend::cpu, dtype)) {
      EXPECT_EQ(conv, "") << "conv2d refused " << dtype_name(dtype) << " on a CPU that computes it";
      EXPECT_EQ(linear, "") << "linear refused " << dtype_name(dtype) << " on a CPU that computes it";
      continue;
    }
    for (const std::string& message : {conv, linear}) {
      EXPECT_NE(message.find("train.precision"), std::string::npos) << dtype_name(dtype) << ": " << message;
      EXPECT_NE(message.find("device: cuda"), std::string::npos) << message;
      if (dtype == DType::bf16) EXPECT_NE(message.find("AVX512_BF16"), std::string::npos) << message;
    }
  }
  EXPECT_FALSE(supports(Op::conv2d, Backend::cpu, DType::f16)) << "float16 on the CPU is never computed";
  EXPECT_EQ(supports(Op::conv2d, Backend::cpu, DType::bf16), !cpu::bf16_unavailable_reason());
  EXPECT_EQ(supports(Op::linear, Backend::cpu, DType::bf16), !cpu::bf16_unavailable_reason());
}

// ---- every backend that computes in 16 bits against the oracle ---------------------

// Backends with mixed precision: the reference (trivially, it is the oracle), CUDA
// (skips without a GPU) and the CPU in bf16 (skips on a CPU without AVX512_BF16).
class MixedBackend : public ::testing::TestWithParam<std::tuple<Backend, DType>> {};

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

TEST_P(MixedBackend, Conv2dMatchesTheOracleOnRoundedOperands) {
  const auto [backend, dtype] = GetParam();
  BT_SKIP_UNLESS_COMPUTES(backend, dtype);
  for (const Conv2dSpec& s : {mixed_conv(dtype), mixed_pointwise_conv(dtype)}) {
    SCOPED_TRACE(s.is_pointwise() ? "pointwise 1x1" : "3x3 stride 2x1");
    auto op = make_conv2d(backend, s);
    // Magnitudes up to 4: products up to 16, still far from fp16's 65504.
    const Tensor x = random_tensor(s.input_shape(), 31, -4.0f, 4.0f), w = random_tensor(s.weight_shape(), 32),
                 b = random_tensor({s.out_channels}, 33), dy = random_tensor(s.output_shape(), 34);
    const OpResults expected = oracle_on_rounded_operands(s, kConv2dOracle, dtype, x, w, b, dy);
    const OpResults actual = run_on_backend(*op, backend, x, w, b, dy, s.output_shape());

    // cuDNN's PSEUDO_HALF/BFLOAT16 configurations write y, dx and dw in the 16-bit
    // type: one rounding, at most u relative to the value before the bias (|bias| <= 1,
    // so at most u|y| + u), plus float32 accumulation in any order over K terms (K eps,
    // the worst case, tensor cores summing in blocks). 2x headroom on the rounding.
    // oneDNN (cpu) and the reference write float32 results: accumulation order only.
    const double eps = 0x1p-24, result_u = backend == Backend::cuda ? unit_roundoff(dtype) : 0.0;
    const std::int64_t fwd_terms = s.in_channels * s.kernel_h * s.kernel_w;
    const std::int64_t data_terms = s.out_channels * s.kernel_h * s.kernel_w;
    const std::int64_t weight_terms = s.batch * s.out_h() * s.out_w();
    expect_close(actual.y, expected.y, s.output_shape(), {2 * result_u + fwd_terms * eps, 2 * result_u}, "y");
    expect_close(actual.dx, expected.dx, s.input_shape(), {2 * result_u + data_terms * eps, 0.0}, "dx");
    expect_close(actual.dw, expected.dw, s.weight_shape(), {2 * result_u + weight_terms * eps, 0.0}, "dweight");
    // dbias: a float32 sum of the float32 gradient on every backend.
    expect_close(actual.db, expected.db, {s.out_channels}, {weight_terms * eps, 0.0}, "dbias");
    EXPECT_GT(max_abs(expected.y), 0.0);
  }
}

TEST_P(MixedBackend, LinearMatchesTheOracleOnRoundedOperands) {
  const auto [backend, dtype] = GetParam();
  BT_SKIP_UNLESS_COMPUTES(backend, dtype);
  const LinearSpec s = mixed_linear(dtype);
  auto op = make_linear(backend, s);
  const Tensor x = random_tensor(s.input_shape(), 41, -4.0f, 4.0f), w = random_tensor(s.weight_shape(), 42),
               b = random_tensor({s.out_features}, 43), dy = random_tensor(s.output_shape(), 44);
  const OpResults expected = oracle_on_rounded_operands(s, kLinearOracle, dtype, x, w, b, dy);
  const OpResults actual = run_on_backend(*op, backend, x, w, b, dy, s.output_shape());
  // cublasGemmEx and oneDNN's bf16 GEMM write float32 results directly: only float32
  // accumulation error (K eps, the worst case over any summation order) separates
  // them from the oracle.
  const double eps = 0x1p-24;
  expect_close(actual.y, expected.y, s.output_shape(), {s.in_features * eps * 4, 0.0}, "y");
  expect_close(actual.dx, expected.dx, s.input_shape(), {s.out_features * eps * 4, 0.0}, "dx");
  expect_close(actual.dw, expected.dw, s.weight_shape(), {s.batch * eps * 4, 0.0}, "dweight");
  expect_close(actual.db, expected.db, {9}, {s.batch * eps * 4, 0.0}, "dbias");
}

std::string backend_dtype_name(const ::testing::TestParamInfo<std::tuple<Backend, DType>>& info) {
  return std::string(backend_name(std::get<0>(info.param))) + "_" + dtype_name(std::get<1>(info.param));
}
// The CPU computes bf16 only (float16 is refused: TheCpuBackendRefusesWhatItCannotCompute).
INSTANTIATE_TEST_SUITE_P(Backends, MixedBackend,
                         ::testing::Values(std::tuple{Backend::reference, DType::bf16},
                                           std::tuple{Backend::reference, DType::f16},
                                           std::tuple{Backend::cuda, DType::bf16}, std::tuple{Backend::cuda, DType::f16},
                                           std::tuple{Backend::cpu, DType::bf16}),
                         backend_dtype_name);

}  // namespace
}  // namespace bigtrain::kernels
