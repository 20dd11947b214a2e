#include "kernels/reference/aggregation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace bigtrain::kernels::reference {

void mean_rows_forward(const Tensor& h, Tensor& z) {
  const std::int64_t n = h.dim(0), d = h.dim(1);
  const float* in = h.data<float>();
  float* out = z.data<float>();
  for (std::int64_t j = 0; j < d; ++j) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < n; ++i) sum += in[i * d + j];
    out[j] = static_cast<float>(sum / static_cast<double>(n));
  }
}

void mean_rows_backward(const Tensor& dz, Tensor& dh) {
  const std::int64_t n = dh.dim(0), d = dh.dim(1);
  const float* g = dz.data<float>();
  float* out = dh.data<float>();
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < d; ++j) out[i * d + j] = static_cast<float>(static_cast<double>(g[j]) / n);
}

void max_rows_forward(const Tensor& h, Tensor& z, Tensor& argmax) {
  const std::int64_t n = h.dim(0), d = h.dim(1);
  const float* in = h.data<float>();
  float* out = z.data<float>();
  std::int32_t* where = argmax.data<std::int32_t>();
  for (std::int64_t j = 0; j < d; ++j) {
    std::int64_t best = 0;
    for (std::int64_t i = 1; i < n; ++i)
      if (in[i * d + j] > in[best * d + j]) best = i;
    out[j] = in[best * d + j];
    where[j] = static_cast<std::int32_t>(best);
  }
}

void max_rows_backward(const Tensor& dz, const Tensor& argmax, Tensor& dh) {
  const std::int64_t n = dh.dim(0), d = dh.dim(1);
  const float* g = dz.data<float>();
  const std::int32_t* where = argmax.data<std::int32_t>();
  float* out = dh.data<float>();
  for (std::int64_t i = 0; i < n * d; ++i) out[i] = 0.0f;
  for (std::int64_t j = 0; j < d; ++j) out[where[j] * d + j] = g[j];
}

void tanh_forward(const Tensor& x, Tensor& y) {
  const float* in = x.data<float>();
  float* out = y.data<float>();
  for (std::int64_t i = 0; i < x.numel(); ++i) out[i] = static_cast<float>(std::tanh(static_cast<double>(in[i])));
}

void tanh_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const float *out = y.data<float>(), *g = dy.data<float>();
  float* gin = dx.data<float>();
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    const double v = out[i];
    gin[i] = static_cast<float>(g[i] * (1.0 - v * v));
  }
}

void sigmoid_forward(const Tensor& x, Tensor& y) {
  const float* in = x.data<float>();
  float* out = y.data<float>();
  for (std::int64_t i = 0; i < x.numel(); ++i)
    out[i] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(in[i]))));
}

void sigmoid_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const float *out = y.data<float>(), *g = dy.data<float>();
  float* gin = dx.data<float>();
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    const double v = out[i];
    gin[i] = static_cast<float>(g[i] * v * (1.0 - v));
  }
}

void multiply(const Tensor& a, const Tensor& b, Tensor& out) {
  const float *x = a.data<float>(), *y = b.data<float>();
  float* o = out.data<float>();
  for (std::int64_t i = 0; i < a.numel(); ++i) o[i] = x[i] * y[i];
}

void softmax_forward(const Tensor& s, Tensor& a) {
  const std::int64_t n = s.numel();
  const float* in = s.data<float>();
  float* out = a.data<float>();
  double top = in[0];
  for (std::int64_t i = 1; i < n; ++i) top = std::max(top, static_cast<double>(in[i]));
  double total = 0.0;
  for (std::int64_t i = 0; i < n; ++i) total += std::exp(in[i] - top);
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(std::exp(in[i] - top) / total);
}

void softmax_backward(const Tensor& a, const Tensor& da, Tensor& ds) {
  const std::int64_t n = a.numel();
  const float *p = a.data<float>(), *g = da.data<float>();
  float* out = ds.data<float>();
  double dot = 0.0;
  for (std::int64_t i = 0; i < n; ++i) dot += static_cast<double>(p[i]) * g[i];
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(p[i] * (g[i] - dot));
}

void weighted_sum_rows_forward(const Tensor& a, const Tensor& h, Tensor& z) {
  const std::int64_t n = h.dim(0), d = h.dim(1);
  const float *w = a.data<float>(), *in = h.data<float>();
  float* out = z.data<float>();
  for (std::int64_t j = 0; j < d; ++j) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < n; ++i) sum += static_cast<double>(w[i]) * in[i * d + j];
    out[j] = static_cast<float>(sum);
  }
}

void weighted_sum_rows_backward(const Tensor& a, const Tensor& h, const Tensor& dz, Tensor& da, Tensor& dh) {
  const std::int64_t n = h.dim(0), d = h.dim(1);
  const float *w = a.data<float>(), *in = h.data<float>(), *g = dz.data<float>();
  float *gw = da.data<float>(), *gh = dh.data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    double dot = 0.0;
    for (std::int64_t j = 0; j < d; ++j) {
      dot += static_cast<double>(in[i * d + j]) * g[j];
      gh[i * d + j] = w[i] * g[j];
    }
    gw[i] = static_cast<float>(dot);
  }
}

}  // namespace bigtrain::kernels::reference
