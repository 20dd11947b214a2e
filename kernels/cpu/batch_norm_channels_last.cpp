#include "kernels/cpu/batch_norm_channels_last.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/batch_norm_arithmetic.hpp"
#include "kernels/cpu/moment_sums.hpp"

namespace bigtrain::kernels::cpu {

namespace {

// An nhwc tensor as rows: one row per pixel, its channels contiguous.
struct Rows {
  std::int64_t batch, plane, channels;
  explicit Rows(const BatchNormSpec& spec)
      : batch(spec.batch), plane(spec.height * spec.width), channels(spec.channels) {}
  std::int64_t count() const { return batch * plane; }
  std::int64_t chunks_per_sample() const { return (plane + kMomentChunk - 1) / kMomentChunk; }
  std::int64_t chunks() const { return batch * chunks_per_sample(); }
};

// Two sums per channel: `accumulate(row, first, second)` adds one row's terms into
// float partials; each chunk of a sample's rows gets its own partials (in
// parallel), then the chunks add up in double, per channel, in (sample, chunk)
// order, whatever the thread count.
template <typename Accumulate>
void chunked_sums(const Rows& rows, Accumulate&& accumulate, double* first, double* second) {
  const std::int64_t channels = rows.channels, per_sample = rows.chunks_per_sample();
  std::vector<float> partials(static_cast<std::size_t>(rows.chunks() * 2 * channels));
#pragma omp parallel for schedule(static)
  for (std::int64_t chunk = 0; chunk < rows.chunks(); ++chunk) {
    const std::int64_t n = chunk / per_sample, begin = (chunk % per_sample) * kMomentChunk;
    const std::int64_t end = std::min(rows.plane, begin + kMomentChunk);
    float* s = partials.data() + chunk * 2 * channels;
    float* q = s + channels;
    std::fill_n(s, 2 * channels, 0.0f);
    for (std::int64_t i = begin; i < end; ++i) accumulate(n * rows.plane + i, s, q);
  }
  std::fill_n(first, channels, 0.0);
  std::fill_n(second, channels, 0.0);
  for (std::int64_t chunk = 0; chunk < rows.chunks(); ++chunk) {
    const float* s = partials.data() + chunk * 2 * channels;
    const float* q = s + channels;
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c) first[c] += s[c], second[c] += q[c];
  }
}

// out = relu?(a * in + b (+ residual)) per channel; the sum is rounded before the
// residual is added, as a separate add would see it.
template <bool Relu>
void affine_rows(const Rows& rows, const float* in, float* out, const float* a, const float* b,
                 const float* residual) {
  const std::int64_t channels = rows.channels;
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows.count(); ++row) {
    const float* ip = in + row * channels;
    float* op = out + row * channels;
    if (residual == nullptr) {
#pragma omp simd
      for (std::int64_t c = 0; c < channels; ++c) op[c] = clamp_if<Relu>(a[c] * ip[c] + b[c]);
      continue;
    }
    const float* rp = residual + row * channels;
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c) {
      const float normalised = a[c] * ip[c] + b[c];
      op[c] = clamp_if<Relu>(normalised + rp[c]);
    }
  }
}

// Sums of dy (through the ReLU's mask) and of dy * (x - mean) per channel.
template <bool Relu>
void gradient_sums(const Rows& rows, const float* x, const float* y, const float* dy, const float* mean,
                   double* sum_dy, double* sum_dy_xmu) {
  const std::int64_t channels = rows.channels;
  chunked_sums(
      rows,
      [&](std::int64_t row, float* s, float* sx) {
        const float* xp = x + row * channels;
        const float* yp = Relu ? y + row * channels : nullptr;
        const float* dp = dy + row * channels;
#pragma omp simd
        for (std::int64_t c = 0; c < channels; ++c) {
          const float d = through_relu<Relu>(yp, dp, c);
          s[c] += d;
          sx[c] += d * (xp[c] - mean[c]);
        }
      },
      sum_dy, sum_dy_xmu);
}

template <bool Relu>
void forward_training(const BatchNormSpec& spec, const float* x, const float* gamma, const float* beta, float* y,
                      float* mean_out, float* invstd_out, float* rm, float* rv, float momentum,
                      const float* residual) {
  const Rows rows(spec);
  const std::int64_t channels = rows.channels;
  const std::vector<float> shift(x, x + channels);  // each channel's first value, as the blocked loops
  std::vector<double> sum(channels), squares(channels);
  chunked_sums(
      rows,
      [&](std::int64_t row, float* s, float* q) {
        const float* p = x + row * channels;
#pragma omp simd
        for (std::int64_t c = 0; c < channels; ++c) {
          const float d = p[c] - shift[c];
          s[c] += d;
          q[c] += d * d;
        }
      },
      sum.data(), squares.data());
  const double count = static_cast<double>(rows.count());
  std::vector<float> a(channels), b(channels);
  for (std::int64_t c = 0; c < channels; ++c) {
    const ChannelAffine affine = training_affine(c, shift[c], sum[c], squares[c], count, spec.epsilon, gamma, beta,
                                                 momentum, mean_out, invstd_out, rm, rv);
    a[c] = affine.a, b[c] = affine.b;
  }
  affine_rows<Relu>(rows, x, y, a.data(), b.data(), residual);
}

template <bool Relu>
void backward_training(const BatchNormSpec& spec, const float* x, const float* y, const float* dy,
                       const float* gamma, const float* mean, const float* inv, float* dx, float* dg, float* db) {
  const Rows rows(spec);
  const std::int64_t channels = rows.channels;
  std::vector<double> sum_dy(channels), sum_dy_xmu(channels);
  gradient_sums<Relu>(rows, x, y, dy, mean, sum_dy.data(), sum_dy_xmu.data());
  const double count = static_cast<double>(rows.count());
  std::vector<float> scale(channels), mean_dy(channels), xmu_scale(channels);
  for (std::int64_t c = 0; c < channels; ++c) {
    const TrainingGradient gradient = training_gradient(c, sum_dy[c], sum_dy_xmu[c], count, gamma, inv, dg, db);
    scale[c] = gradient.scale, mean_dy[c] = gradient.mean_dy, xmu_scale[c] = gradient.xmu_scale;
  }
  const float *sp = scale.data(), *mp = mean_dy.data(), *xp_scale = xmu_scale.data();
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows.count(); ++row) {
    const float* xp = x + row * channels;
    const float* yp = Relu ? y + row * channels : nullptr;
    const float* dp = dy + row * channels;
    float* op = dx + row * channels;
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c)
      op[c] = sp[c] * (through_relu<Relu>(yp, dp, c) - mp[c] - (xp[c] - mean[c]) * xp_scale[c]);
  }
}

template <bool Relu>
void backward_inference(const BatchNormSpec& spec, const float* x, const float* y, const float* dy,
                        const float* gamma, const float* rm, const float* rv, float* dx, float* dg, float* db) {
  const Rows rows(spec);
  const std::int64_t channels = rows.channels;
  std::vector<double> sum_dy(channels), sum_dy_xmu(channels);
  gradient_sums<Relu>(rows, x, y, dy, rm, sum_dy.data(), sum_dy_xmu.data());
  std::vector<float> a(channels);
  for (std::int64_t c = 0; c < channels; ++c)
    a[c] = inference_gradient(c, sum_dy[c], sum_dy_xmu[c], gamma, rv, spec.epsilon, dg, db);
  const float* ap = a.data();
  // dx = a * dy + 0, as the plain loop's affine() computes it.
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows.count(); ++row) {
    const float* yp = Relu ? y + row * channels : nullptr;
    const float* dp = dy + row * channels;
    float* op = dx + row * channels;
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c) op[c] = ap[c] * through_relu<Relu>(yp, dp, c) + 0.0f;
  }
}

}  // namespace

void channels_last_forward_training(const BatchNormSpec& spec, const float* x, const float* gamma, const float* beta,
                                    float* y, float* save_mean, float* save_invstd, float* running_mean,
                                    float* running_var, float momentum, const float* residual) {
  if (spec.relu)
    forward_training<true>(spec, x, gamma, beta, y, save_mean, save_invstd, running_mean, running_var, momentum,
                           residual);
  else
    forward_training<false>(spec, x, gamma, beta, y, save_mean, save_invstd, running_mean, running_var, momentum,
                            residual);
}

void channels_last_forward_inference(const BatchNormSpec& spec, const float* x, const float* gamma,
                                     const float* beta, const float* running_mean, const float* running_var,
                                     float* y, const float* residual) {
  const Rows rows(spec);
  std::vector<float> a(rows.channels), b(rows.channels);
  for (std::int64_t c = 0; c < rows.channels; ++c) {
    const ChannelAffine affine = inference_affine(c, gamma, beta, running_mean, running_var, spec.epsilon);
    a[c] = affine.a, b[c] = affine.b;
  }
  if (spec.relu)
    affine_rows<true>(rows, x, y, a.data(), b.data(), residual);
  else
    affine_rows<false>(rows, x, y, a.data(), b.data(), residual);
}

void channels_last_backward_training(const BatchNormSpec& spec, const float* x, const float* relu_output,
                                     const float* dy, const float* gamma, const float* save_mean,
                                     const float* save_invstd, float* dx, float* dgamma, float* dbeta) {
  if (relu_output != nullptr)
    backward_training<true>(spec, x, relu_output, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
  else
    backward_training<false>(spec, x, nullptr, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
}

void channels_last_backward_inference(const BatchNormSpec& spec, const float* x, const float* relu_output,
                                      const float* dy, const float* gamma, const float* running_mean,
                                      const float* running_var, float* dx, float* dgamma, float* dbeta) {
  if (relu_output != nullptr)
    backward_inference<true>(spec, x, relu_output, dy, gamma, running_mean, running_var, dx, dgamma, dbeta);
  else
    backward_inference<false>(spec, x, nullptr, dy, gamma, running_mean, running_var, dx, dgamma, dbeta);
}

}  // namespace bigtrain::kernels::cpu
