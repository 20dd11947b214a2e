#include "kernels/reference/round_to_dtype.hpp"

#include <bit>
#include <cmath>

#include "kernels/core/error.hpp"

namespace bigtrain::kernels {

std::uint16_t float_to_bf16_bits(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  // Adding 0x7FFF plus the kept part's lowest bit rounds the dropped 16 bits to
  // nearest, ties to even; a NaN is kept quiet instead (the addition could carry
  // its payload into the exponent and make it infinite).
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  const std::uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<std::uint16_t>((bits + 0x7FFFu + lsb) >> 16);
}

float bf16_bits_to_float(std::uint16_t bits) { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }

std::uint16_t float_to_f16_bits(float value) {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return sign | 0x7E00u;   // NaN (quiet)
  if (magnitude >= 0x477FF000u) return sign | 0x7C00u;  // >= 65520, halfway past 65504: +-inf
  auto round_shift = [](std::uint32_t mantissa, int shift) {
    std::uint32_t kept = mantissa >> shift;
    const std::uint32_t dropped = mantissa & ((1u << shift) - 1u), half = 1u << (shift - 1);
    if (dropped > half || (dropped == half && (kept & 1u))) ++kept;  // a carry into the exponent is right
    return kept;
  };
  const int exponent = static_cast<int>(magnitude >> 23);  // biased by 127
  if (exponent < 113) {
    // Below 2^-14, fp16's smallest normal: a subnormal counting units of 2^-24.
    // value = m * 2^(exponent - 150) = m * 2^(exponent - 126) units, so m shifts
    // right by 126 - exponent; past 25 bits everything is under half a unit.
    const int shift = 126 - exponent;
    if (exponent == 0 || shift > 25) return sign;
    return static_cast<std::uint16_t>(sign | round_shift((magnitude & 0x7FFFFFu) | 0x800000u, shift));
  }
  const std::uint32_t rebiased = (static_cast<std::uint32_t>(exponent - 112) << 23) | (magnitude & 0x7FFFFFu);
  return static_cast<std::uint16_t>(sign | round_shift(rebiased, 13));
}

float f16_bits_to_float(std::uint16_t bits) {
  const int exponent = (bits >> 10) & 0x1F;
  const int mantissa = bits & 0x3FF;
  float magnitude;
  if (exponent == 0) magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  else if (exponent == 31) magnitude = mantissa == 0 ? INFINITY : NAN;
  else magnitude = std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
  return (bits & 0x8000u) ? -magnitude : magnitude;
}

float round_to_dtype(float value, DType dtype) {
  switch (dtype) {
    case DType::f32: return value;
    case DType::bf16: return bf16_bits_to_float(float_to_bf16_bits(value));
    case DType::f16: return f16_bits_to_float(float_to_f16_bits(value));
    default: break;
  }
  throw Error(fmt::format("round_to_dtype: {} is not a compute type (float32, bfloat16, float16)", dtype_name(dtype)));
}

void round_to_dtype(std::span<const float> in, std::span<float> out, DType dtype) {
  BT_CHECK(in.size() == out.size(), "round_to_dtype: {} values in, {} out", in.size(), out.size());
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = round_to_dtype(in[i], dtype);
}

RoundedOperand::RoundedOperand(const Tensor& t, DType dtype) : data_(t.f32()) {
  if (dtype == DType::f32) return;
  const auto n = static_cast<std::size_t>(t.numel());
  rounded_.resize(n);
  round_to_dtype(std::span<const float>(data_, n), rounded_, dtype);
  data_ = rounded_.data();
}

}  // namespace bigtrain::kernels
