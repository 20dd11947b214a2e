#pragma once
// The sums the normalisation loops (batch_norm.cpp, group_norm.cpp) are made of,
// over one contiguous range. Partial sums run in float over short chunks
// (vectorised) and chunks add up in double, so the rounding error stays that of a
// 1024-term float sum however long the range; the order is fixed, so the result
// does not depend on the thread count.
#include <algorithm>
#include <cstdint>

namespace bigtrain::kernels::cpu {

inline constexpr std::int64_t kMomentChunk = 1024;

// Adds the sums of (x - shift) and (x - shift)^2 over [x, x + count).
inline void add_shifted_moments(const float* x, std::int64_t count, float shift, double& sum, double& squares) {
  for (std::int64_t begin = 0; begin < count; begin += kMomentChunk) {
    const std::int64_t end = std::min(count, begin + kMomentChunk);
    float s = 0.0f, q = 0.0f;
#pragma omp simd reduction(+ : s, q)
    for (std::int64_t i = begin; i < end; ++i) {
      const float d = x[i] - shift;
      s += d;
      q += d * d;
    }
    sum += s, squares += q;
  }
}

// Adds the sums of dy and dy * (x - mean) over [0, count): what every backward needs.
inline void add_gradient_sums(const float* x, const float* dy, std::int64_t count, float mean, double& sum_dy,
                              double& sum_dy_xmu) {
  for (std::int64_t begin = 0; begin < count; begin += kMomentChunk) {
    const std::int64_t end = std::min(count, begin + kMomentChunk);
    float s = 0.0f, sx = 0.0f;
#pragma omp simd reduction(+ : s, sx)
    for (std::int64_t i = begin; i < end; ++i) {
      s += dy[i];
      sx += dy[i] * (x[i] - mean);
    }
    sum_dy += s, sum_dy_xmu += sx;
  }
}

}  // namespace bigtrain::kernels::cpu
