#include "kernels/cpu/elementwise.hpp"

#include <algorithm>
#include <cstdint>

#include "kernels/core/philox.hpp"

namespace bigtrain::kernels::cpu {
namespace {

// Below this many elements a parallel region costs more than it saves.
constexpr std::int64_t kParallelThreshold = 1 << 15;

}  // namespace

void relu_forward(const Tensor& x, Tensor& y) {
  const float* in = x.data<float>();
  float* out = y.data<float>();
  const std::int64_t n = x.numel();
  // `in < 0 ? 0 : in` keeps NaN, as torch.relu does (a max with 0 might not).
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) out[i] = in[i] < 0.0f ? 0.0f : in[i];
}

void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  const float *out = y.data<float>(), *grad_out = dy.data<float>();
  float* grad_in = dx.data<float>();
  const std::int64_t n = y.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  // The gradient is loaded unconditionally: behind the condition gcc compiled a
  // scalar loop with a branch per element that mispredicts on the random signs of
  // activations (7% of a ResNet-50 training step); loaded first, it is a blend.
  for (std::int64_t i = 0; i < n; ++i) {
    const float gradient = grad_out[i];
    grad_in[i] = out[i] > 0.0f ? gradient : 0.0f;
  }
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  const float *lhs = a.data<float>(), *rhs = b.data<float>();
  float* sum = out.data<float>();
  const std::int64_t n = a.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) sum[i] = lhs[i] + rhs[i];
}

void axpy(float alpha, const Tensor& x, Tensor& y) {
  const float* in = x.data<float>();
  float* out = y.data<float>();
  const std::int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) out[i] += alpha * in[i];
}

void scale(float alpha, Tensor& x) {
  float* values = x.data<float>();
  const std::int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) values[i] *= alpha;
}

double sum_of_squares(const Tensor& x) {
  const float* values = x.data<float>();
  const std::int64_t n = x.numel();
  // An OpenMP reduction adds the threads' partial sums in arrival order, so the
  // result could differ in the last bit from run to run (and with it a clipped
  // gradient). Partial sums over a fixed chunking, added in chunk order, are the
  // same bits for any thread count and timing.
  constexpr std::int64_t kMaxChunks = 64;
  const std::int64_t chunk = std::max<std::int64_t>(4096, (n + kMaxChunks - 1) / kMaxChunks);
  const std::int64_t chunks = (n + chunk - 1) / chunk;
  double partial[kMaxChunks] = {};
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t end = std::min(n, (c + 1) * chunk);
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t i = c * chunk; i < end; ++i) sum += static_cast<double>(values[i]) * values[i];
    partial[c] = sum;
  }
  double total = 0.0;
  for (std::int64_t c = 0; c < chunks; ++c) total += partial[c];
  return total;
}

bool all_finite(const Tensor& x) {
  const float* values = x.data<float>();
  const std::int64_t n = x.numel();
  std::int64_t non_finite = 0;
  // v - v is 0 for every finite v and NaN for +-Inf and NaN; unlike std::isfinite
  // this compiles to a vector compare.
#pragma omp parallel for simd schedule(static) reduction(+ : non_finite) if (n >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) non_finite += (values[i] - values[i] != 0.0f) ? 1 : 0;
  return non_finite == 0;
}

void dropout_forward(const Tensor& x, float p, std::uint64_t seed, std::uint64_t offset, Tensor& y, Tensor& mask) {
  const float* in = x.data<float>();
  float* out = y.data<float>();
  std::uint8_t* kept = mask.data<std::uint8_t>();
  const std::int64_t n = x.numel();
  const float keep_scale = 1.0f / (1.0f - p);  // unused (infinite) when p == 1: nothing is kept
  const philox::Key key = philox::key_from_seed(seed);
  // Chunks of whole Philox blocks: each call yields the draws of four consecutive
  // stream positions, reused for all of them.
  constexpr std::int64_t kChunk = 4096;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
    const std::int64_t end = std::min(n, (chunk + 1) * kChunk);
    philox::Counter draws{};
    std::uint64_t drawn_block = ~std::uint64_t{0};
    for (std::int64_t i = chunk * kChunk; i < end; ++i) {
      const std::uint64_t position = offset + static_cast<std::uint64_t>(i);
      if ((position >> 2) != drawn_block) {
        drawn_block = position >> 2;
        draws = philox::philox4x32_10(philox::block_counter(position), key);
      }
      const bool keep = philox::to_unit_float(draws.v[position & 3u]) >= p;
      kept[i] = keep ? 1 : 0;
      out[i] = keep ? in[i] * keep_scale : 0.0f;
    }
  }
}

void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx) {
  const float* grad_out = dy.data<float>();
  const std::uint8_t* kept = mask.data<std::uint8_t>();
  float* grad_in = dx.data<float>();
  const std::int64_t n = dy.numel();
  const float keep_scale = 1.0f / (1.0f - p);
#pragma omp parallel for simd schedule(static) if (n >= kParallelThreshold)
  for (std::int64_t i = 0; i < n; ++i) grad_in[i] = kept[i] ? grad_out[i] * keep_scale : 0.0f;
}

}  // namespace bigtrain::kernels::cpu
