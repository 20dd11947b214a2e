#include "kernels/cpu/aggregation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace bigtrain::kernels::cpu {
namespace {

// N x D of one image is small (hundreds of tiles x 512..2048 features): threads pay
// only for the larger matrices.
constexpr std::int64_t kParallelThreshold = 1 << 16;

}  // namespace

void mean_rows_forward(const Tensor& h, Tensor& z) {
  const std::int64_t n = h.dim(0), d = h.dim(1);
  const float* in = h.data<float>();
  float* out = z.data<float>();
  const float inv = 1.0f / static_cast<float>(n);
  for (std::int64_t j = 0; j < d; ++j) out[j] = 0.0f;
  // Row by row: contiguous reads, the accumulator row stays in cache.
  for (std::int64_t i = 0; i < n; ++i) {
    const float* row = in + i * d;
#pragma omp simd
    for (std::int64_t j = 0; j < d; ++j) out[j] += row[j];
  }
  for (std::int64_t j = 0; j < d; ++j) out[j] *= inv;
}

void mean_rows_backward(const Tensor& dz, Tensor& dh) {
  const std::int64_t n = dh.dim(0), d = dh.dim(1);
  const float* g = dz.data<float>();
  float* out = dh.data<float>();
  const float inv = 1.0f / static_cast<float>(n);
#pragma omp parallel for schedule(static) if (n * d >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < d; ++j) out[i * d + j] = g[j] * inv;
}

void max_rows_forward(const Tensor& h, Tensor& z, Tensor& argmax) {
  const std::int64_t n = h.dim(0), d = h.dim(1);
  const float* in = h.data<float>();
  float* out = z.data<float>();
  std::int32_t* where = argmax.data<std::int32_t>();
  for (std::int64_t j = 0; j < d; ++j) {
    out[j] = in[j];
    where[j] = 0;
  }
  for (std::int64_t i = 1; i < n; ++i) {
    const float* row = in + i * d;
    for (std::int64_t j = 0; j < d; ++j) {
      if (row[j] > out[j]) {
        out[j] = row[j];
        where[j] = static_cast<std::int32_t>(i);
      }
    }
  }
}

void max_rows_backward(const Tensor& dz, const Tensor& argmax, Tensor& dh) {
  const std::int64_t d = dh.dim(1);
  const float* g = dz.data<float>();
  const std::int32_t* where = argmax.data<std::int32_t>();
  float* out = dh.data<float>();
  std::fill(out, out + dh.numel(), 0.0f);
  for (std::int64_t j = 0; j < d; ++j) out[where[j] * d + j] = g[j];
}

void tanh_forward(const Tensor& x, Tensor& y) {
  const float* in = x.data<float>();
  float* out = y.data<float>();
  const std::int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) out[i] = std::tanh(in[i]);
}

void tanh_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const float *out = y.data<float>(), *g = dy.data<float>();
  float* gin = dx.data<float>();
  const std::int64_t n = y.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) gin[i] = g[i] * (1.0f - out[i] * out[i]);
}

void sigmoid_forward(const Tensor& x, Tensor& y) {
  const float* in = x.data<float>();
  float* out = y.data<float>();
  const std::int64_t n = x.numel();
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-in[i]));
}

void sigmoid_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const float *out = y.data<float>(), *g = dy.data<float>();
  float* gin = dx.data<float>();
  const std::int64_t n = y.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) gin[i] = g[i] * out[i] * (1.0f - out[i]);
}

void multiply(const Tensor& a, const Tensor& b, Tensor& out) {
  const float *x = a.data<float>(), *y = b.data<float>();
  float* o = out.data<float>();
  const std::int64_t n = a.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) o[i] = x[i] * y[i];
}

void softmax_forward(const Tensor& s, Tensor& a) {
  const std::int64_t n = s.numel();
  const float* in = s.data<float>();
  float* out = a.data<float>();
  float top = in[0];
  for (std::int64_t i = 1; i < n; ++i) top = std::max(top, in[i]);
  // Double total: thousands of tiles sum terms of very different sizes.
  double total = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = std::exp(in[i] - top);
    total += out[i];
  }
  const float inv = static_cast<float>(1.0 / total);
  for (std::int64_t i = 0; i < n; ++i) out[i] *= inv;
}

void softmax_backward(const Tensor& a, const Tensor& da, Tensor& ds) {
  const std::int64_t n = a.numel();
  const float *p = a.data<float>(), *g = da.data<float>();
  float* out = ds.data<float>();
  double dot = 0.0;
  for (std::int64_t i = 0; i < n; ++i) dot += static_cast<double>(p[i]) * g[i];
  const float fdot = static_cast<float>(dot);
  for (std::int64_t i = 0; i < n; ++i) out[i] = p[i] * (g[i] - fdot);
}

void weighted_sum_rows_forward(const Tensor& a, const Tensor& h, Tensor& z) {
  const std::int64_t n = h.dim(0), d = h.dim(1);
  const float *w = a.data<float>(), *in = h.data<float>();
  float* out = z.data<float>();
  for (std::int64_t j = 0; j < d; ++j) out[j] = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) {
    const float* row = in + i * d;
    const float wi = w[i];
#pragma omp simd
    for (std::int64_t j = 0; j < d; ++j) out[j] += wi * row[j];
  }
}

void weighted_sum_rows_backward(const Tensor& a, const Tensor& h, const Tensor& dz, Tensor& da, Tensor& dh) {
  const std::int64_t n = h.dim(0), d = h.dim(1);
  const float *w = a.data<float>(), *in = h.data<float>(), *g = dz.data<float>();
  float *gw = da.data<float>(), *gh = dh.data<float>();
#pragma omp parallel for schedule(static) if (n * d >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) {
    float dot = 0.0f;
    const float* row = in + i * d;
    float* grow = gh + i * d;
    for (std::int64_t j = 0; j < d; ++j) {
      dot += row[j] * g[j];
      grow[j] = w[i] * g[j];
    }
    gw[i] = dot;
  }
}

}  // namespace bigtrain::kernels::cpu
