#include "kernels/reference/elementwise.hpp"

#include <cmath>

#include "kernels/core/philox.hpp"

namespace bigtrain::kernels::reference {

void relu_forward(const Tensor& x, Tensor& y) {
  // `x < 0 ? 0 : x` keeps NaN, as torch.relu does.
  const float* in = x.f32();
  float* out = y.f32();
  for (std::int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] < 0.0f ? 0.0f : in[i];
}

void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const float *out = y.f32(), *grad_out = dy.f32();
  float* grad_in = dx.f32();
  for (std::int64_t i = 0; i < y.numel(); ++i) grad_in[i] = out[i] > 0.0f ? grad_out[i] : 0.0f;
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const float *lhs = a.f32(), *rhs = b.f32();
  float* sum = out.f32();
  for (std::int64_t i = 0; i < a.numel(); ++i) sum[i] = lhs[i] + rhs[i];
}

void axpy(float alpha, const Tensor& x, Tensor& y) {
  const float* in = x.f32();
  float* out = y.f32();
  for (std::int64_t i = 0; i < x.numel(); ++i) out[i] += alpha * in[i];
}

void scale(float alpha, Tensor& x) {
  float* values = x.f32();
  for (std::int64_t i = 0; i < x.numel(); ++i) values[i] *= alpha;
}

double sum_of_squares(const Tensor& x) {
  const float* values = x.f32();
  double total = 0.0;
  for (std::int64_t i = 0; i < x.numel(); ++i) total += static_cast<double>(values[i]) * values[i];
  return total;
}

bool all_finite(const Tensor& x) {
  const float* values = x.f32();
  for (std::int64_t i = 0; i < x.numel(); ++i)
    if (!std::isfinite(values[i])) return false;
  return true;
}

void dropout_forward(const Tensor& x, float p, std::uint64_t seed, std::uint64_t offset, Tensor& y, Tensor& mask) {
  const float keep_scale = 1.0f / (1.0f - p);  // unused (infinite) when p == 1: nothing is kept
  const float* in = x.f32();
  float* out = y.f32();
  std::uint8_t* kept = mask.data<std::uint8_t>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const bool keep = philox::uniform(seed, offset + static_cast<std::uint64_t>(i)) >= p;
    kept[i] = keep ? 1 : 0;
    out[i] = keep ? in[i] * keep_scale : 0.0f;
  }
}

void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx) {
  const float keep_scale = 1.0f / (1.0f - p);
  const float* grad_out = dy.f32();
  const std::uint8_t* kept = mask.data<std::uint8_t>();
  float* grad_in = dx.f32();
  for (std::int64_t i = 0; i < dy.numel(); ++i) grad_in[i] = kept[i] ? grad_out[i] * keep_scale : 0.0f;
}

}  // namespace bigtrain::kernels::reference
