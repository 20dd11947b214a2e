#pragma once
// Rounding float32 to the 16-bit compute types of mixed precision, as the GPU does:
// round to nearest, ties to even (cuda_fp16/cuda_bf16's __float2half_rn and
// __float2bfloat16_rn); fp16 overflow gives +-inf, values below its smallest
// subnormal round to +-0, NaN stays NaN. The reference backend rounds the operands of
// conv2d and linear with these, so it defines what the CUDA backend must produce.
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/core/device.hpp"
#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels {

std::uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(std::uint16_t bits);
std::uint16_t float_to_f16_bits(float value);
float f16_bits_to_float(std::uint16_t bits);

// value rounded to `dtype` and back to float32; f32 returns it unchanged. Only f32,
// bf16 and f16 are compute types (anything else is a bigtrain::Error).
float round_to_dtype(float value, DType dtype);
// out[i] = round_to_dtype(in[i], dtype); in and out have the same size (may alias).
void round_to_dtype(std::span<const float> in, std::span<float> out, DType dtype);

// The float32 values of a tensor rounded to `dtype` (the operands a mixed-precision
// GPU op reads; bias and dbias stay unrounded); for f32 the tensor's own memory,
// without a copy. Not copyable: get() may point into memory the object owns.
class RoundedOperand {
 public:
  RoundedOperand(const Tensor& t, DType dtype);
  RoundedOperand(const RoundedOperand&) = delete;
  RoundedOperand& operator=(const RoundedOperand&) = delete;
  const float* get() const { return data_; }

 private:
  const float* data_;
  std::vector<float> rounded_;
};

}  // namespace bigtrain::kernels
