#include "kernels/cpu/batch_norm.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/batch_norm_arithmetic.hpp"
#include "kernels/cpu/batch_norm_channels_last.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/moment_sums.hpp"

namespace bigtrain::kernels::cpu {

// Why loops and not dnnl::batch_normalization: on NCHW tensors oneDNN 2.6 runs its
// generic ncsp_bnorm implementation, which measured 5-7x slower than these loops on
// this AVX2 machine (8 x 64 x 112 x 112 forward training: 8.6 ms vs 1.6 ms of CPU
// time; backward 10.1 ms vs 1.9 ms), i.e. a fifth of a 3x3 convolution's time per
// layer, where the loops stay near memory bandwidth. Its fast jit kernels need
// blocked or nhwc layouts. Activations are blocked now, and against oneDNN's
// bnorm_jit on nChw16c (2-thread AVX-512, batch 8) the blocked loops below tie in
// the forward pass (256 x 56 x 56: 1.11 vs 1.14 ms) and lose 10-45% backward on
// the large tensors (2.17 vs 1.92 ms; 512 x 28 x 28 0.97 vs 0.66): ~4 ms of a
// 600 ms ResNet-50 training step, not worth giving up results that are the same
// bits for any thread count. The ReLU that follows is fused into the blocked
// loops instead (BatchNormSpec::relu): the forward clamps as it writes, the
// backward masks the gradient as it reads it.
// NCHW suits a per-channel op: each (n, c) plane is contiguous, so every channel
// is N simple vectorisable streams, and channels are independent (parallel, and
// deterministic whatever the thread count: each channel sums in a fixed order).
// nhwc tensors (what AMX's bf16 convolutions write) run through
// batch_norm_channels_last.cpp, with the blocked loops' bits.

namespace {

struct Planes {
  const BatchNormSpec& spec;
  std::int64_t plane() const { return spec.height * spec.width; }
  std::int64_t count() const { return spec.batch * plane(); }
  std::int64_t offset(std::int64_t n, std::int64_t c) const { return (n * spec.channels + c) * plane(); }
};

// Sums of (x - shift) and (x - shift)^2 over one channel.
void shifted_moments(const Planes& planes, const float* x, std::int64_t c, float shift, double& sum,
                     double& squares) {
  sum = 0.0, squares = 0.0;
  for (std::int64_t n = 0; n < planes.spec.batch; ++n)
    add_shifted_moments(x + planes.offset(n, c), planes.plane(), shift, sum, squares);
}

// Sums of dy and dy * (x - mean) over one channel: what every backward pass needs.
void gradient_sums(const Planes& planes, const float* x, const float* dy, std::int64_t c, float mean,
                   double& sum_dy, double& sum_dy_xmu) {
  sum_dy = 0.0, sum_dy_xmu = 0.0;
  for (std::int64_t n = 0; n < planes.spec.batch; ++n)
    add_gradient_sums(x + planes.offset(n, c), dy + planes.offset(n, c), planes.plane(), mean, sum_dy, sum_dy_xmu);
}

// out = a * in + b over one channel (in may alias out).
void affine(const Planes& planes, const float* in, float* out, std::int64_t c, float a, float b) {
  for (std::int64_t n = 0; n < planes.spec.batch; ++n) {
    const float* ip = in + planes.offset(n, c);
    float* op = out + planes.offset(n, c);
#pragma omp simd
    for (std::int64_t i = 0; i < planes.plane(); ++i) op[i] = a * ip[i] + b;
  }
}

// Blocked layouts (nChw8c / nChw16c, Tensor::layout): a group of K channels is
// interleaved, element (n, g*K + k, i) at ((n*G + g)*HW + i)*K + k, so the loops
// run over one group at a time with the K channels as the vector lanes. Sums follow
// the same scheme as moment_sums.hpp: float partials over chunks of a channel's
// elements, added up in double, in a fixed order.
template <int K>
struct Groups {
  const BatchNormSpec& spec;
  std::int64_t count() const { return spec.channels / K; }
  std::int64_t plane() const { return spec.height * spec.width; }
  std::int64_t offset(std::int64_t n, std::int64_t g) const { return (n * count() + g) * plane() * K; }
};

template <int K>
void blocked_moments(const Groups<K>& groups, const float* x, std::int64_t g, const float* shift, double* sum,
                     double* squares) {
  for (int k = 0; k < K; ++k) sum[k] = squares[k] = 0.0;
  for (std::int64_t n = 0; n < groups.spec.batch; ++n) {
    const float* p = x + groups.offset(n, g);
    for (std::int64_t begin = 0; begin < groups.plane(); begin += kMomentChunk) {
      const std::int64_t end = std::min(groups.plane(), begin + kMomentChunk);
      float s[K] = {}, q[K] = {};
      for (std::int64_t i = begin; i < end; ++i)
#pragma omp simd
        for (int k = 0; k < K; ++k) {
          const float d = p[i * K + k] - shift[k];
          s[k] += d;
          q[k] += d * d;
        }
      for (int k = 0; k < K; ++k) sum[k] += s[k], squares[k] += q[k];
    }
  }
}

// y is the fused ReLU's output (null without one).
template <int K, bool Relu>
void blocked_gradient_sums(const Groups<K>& groups, const float* x, const float* y, const float* dy, std::int64_t g,
                           const float* mean, double* sum_dy, double* sum_dy_xmu) {
  for (int k = 0; k < K; ++k) sum_dy[k] = sum_dy_xmu[k] = 0.0;
  for (std::int64_t n = 0; n < groups.spec.batch; ++n) {
    const float* xp = x + groups.offset(n, g);
    const float* yp = Relu ? y + groups.offset(n, g) : nullptr;
    const float* dp = dy + groups.offset(n, g);
    for (std::int64_t begin = 0; begin < groups.plane(); begin += kMomentChunk) {
      const std::int64_t end = std::min(groups.plane(), begin + kMomentChunk);
      float s[K] = {}, sx[K] = {};
      for (std::int64_t i = begin; i < end; ++i)
#pragma omp simd
        for (int k = 0; k < K; ++k) {
          const float d = through_relu<Relu>(yp, dp, i * K + k);
          s[k] += d;
          sx[k] += d * (xp[i * K + k] - mean[k]);
        }
      for (int k = 0; k < K; ++k) sum_dy[k] += s[k], sum_dy_xmu[k] += sx[k];
    }
  }
}

// out = a * in + b per channel over one group (in may alias out), plus the
// residual when there is one (null: none), then the fused ReLU's clamp. The sum
// is rounded before the residual is added, as a separate add would see it.
template <int K, bool Relu>
void blocked_affine(const Groups<K>& groups, const float* in, float* out, std::int64_t g, const float* a,
                    const float* b, const float* residual = nullptr) {
  for (std::int64_t n = 0; n < groups.spec.batch; ++n) {
    const float* ip = in + groups.offset(n, g);
    float* op = out + groups.offset(n, g);
    if (residual == nullptr) {
      for (std::int64_t i = 0; i < groups.plane(); ++i)
#pragma omp simd
        for (int k = 0; k < K; ++k) op[i * K + k] = clamp_if<Relu>(a[k] * ip[i * K + k] + b[k]);
      continue;
    }
    const float* rp = residual + groups.offset(n, g);
    for (std::int64_t i = 0; i < groups.plane(); ++i)
#pragma omp simd
      for (int k = 0; k < K; ++k) {
        const float normalised = a[k] * ip[i * K + k] + b[k];
        op[i * K + k] = clamp_if<Relu>(normalised + rp[i * K + k]);
      }
  }
}

template <int K, bool Relu>
void blocked_forward_training(const BatchNormSpec& spec, const float* xs, const float* gamma, const float* beta,
                              float* ys, float* mean_out, float* invstd_out, float* rm, float* rv, float momentum,
                              const float* residual) {
  const Groups<K> groups{spec};
  const double count = static_cast<double>(spec.batch * groups.plane());
#pragma omp parallel for schedule(static)
  for (std::int64_t g = 0; g < groups.count(); ++g) {
    float shift[K], a[K], b[K];
    double sum[K], squares[K];
    for (int k = 0; k < K; ++k) shift[k] = xs[groups.offset(0, g) + k];
    blocked_moments(groups, xs, g, shift, sum, squares);
    for (int k = 0; k < K; ++k) {
      const ChannelAffine affine = training_affine(g * K + k, shift[k], sum[k], squares[k], count, spec.epsilon, gamma,
                                                   beta, momentum, mean_out, invstd_out, rm, rv);
      a[k] = affine.a, b[k] = affine.b;
    }
    blocked_affine<K, Relu>(groups, xs, ys, g, a, b, residual);
  }
}

template <int K, bool Relu>
void blocked_forward_inference(const BatchNormSpec& spec, const float* xs, const float* gamma, const float* beta,
                               const float* rm, const float* rv, float* ys, const float* residual) {
  const Groups<K> groups{spec};
#pragma omp parallel for schedule(static)
  for (std::int64_t g = 0; g < groups.count(); ++g) {
    float a[K], b[K];
    for (int k = 0; k < K; ++k) {
      const ChannelAffine affine = inference_affine(g * K + k, gamma, beta, rm, rv, spec.epsilon);
      a[k] = affine.a, b[k] = affine.b;
    }
    blocked_affine<K, Relu>(groups, xs, ys, g, a, b, residual);
  }
}

// ys: the fused ReLU's output (null without one).
template <int K, bool Relu>
void blocked_backward_training(const BatchNormSpec& spec, const float* xs, const float* ys, const float* dys,
                               const float* gamma, const float* mean, const float* inv, float* dxs, float* dg,
                               float* db) {
  const Groups<K> groups{spec};
  const double count = static_cast<double>(spec.batch * groups.plane());
#pragma omp parallel for schedule(static)
  for (std::int64_t g = 0; g < groups.count(); ++g) {
    double sum_dy[K], sum_dy_xmu[K];
    float m[K], scale[K], mean_dy[K], xmu_scale[K];
    for (int k = 0; k < K; ++k) m[k] = mean[g * K + k];
    blocked_gradient_sums<K, Relu>(groups, xs, ys, dys, g, m, sum_dy, sum_dy_xmu);
    for (int k = 0; k < K; ++k) {
      const TrainingGradient gradient = training_gradient(g * K + k, sum_dy[k], sum_dy_xmu[k], count, gamma, inv, dg, db);
      scale[k] = gradient.scale, mean_dy[k] = gradient.mean_dy, xmu_scale[k] = gradient.xmu_scale;
    }
    for (std::int64_t n = 0; n < spec.batch; ++n) {
      const float* xp = xs + groups.offset(n, g);
      const float* yp = Relu ? ys + groups.offset(n, g) : nullptr;
      const float* dp = dys + groups.offset(n, g);
      float* op = dxs + groups.offset(n, g);
      for (std::int64_t i = 0; i < groups.plane(); ++i)
#pragma omp simd
        for (int k = 0; k < K; ++k)
          op[i * K + k] =
              scale[k] * (through_relu<Relu>(yp, dp, i * K + k) - mean_dy[k] - (xp[i * K + k] - m[k]) * xmu_scale[k]);
    }
  }
}

template <int K, bool Relu>
void blocked_backward_inference(const BatchNormSpec& spec, const float* xs, const float* ys, const float* dys,
                                const float* gamma, const float* rm, const float* rv, float* dxs, float* dg,
                                float* db) {
  const Groups<K> groups{spec};
#pragma omp parallel for schedule(static)
  for (std::int64_t g = 0; g < groups.count(); ++g) {
    double sum_dy[K], sum_dy_xmu[K];
    float m[K], a[K];
    for (int k = 0; k < K; ++k) m[k] = rm[g * K + k];
    blocked_gradient_sums<K, Relu>(groups, xs, ys, dys, g, m, sum_dy, sum_dy_xmu);
    for (int k = 0; k < K; ++k)
      a[k] = inference_gradient(g * K + k, sum_dy[k], sum_dy_xmu[k], gamma, rv, spec.epsilon, dg, db);
    // dx = a * dy + 0, as the plain loop's affine() computes it.
    for (std::int64_t n = 0; n < spec.batch; ++n) {
      const float* yp = Relu ? ys + groups.offset(n, g) : nullptr;
      const float* dp = dys + groups.offset(n, g);
      float* op = dxs + groups.offset(n, g);
      for (std::int64_t i = 0; i < groups.plane(); ++i)
#pragma omp simd
        for (int k = 0; k < K; ++k) op[i * K + k] = a[k] * through_relu<Relu>(yp, dp, i * K + k) + 0.0f;
    }
  }
}

// Calls body.template operator()<K, Relu>() for the block of `layout` (8 or 16).
template <typename Body>
void with_block(Layout layout, bool relu, Body&& body) {
  if (layout == Layout::blocked8) {
    if (relu)
      body.template operator()<8, true>();
    else
      body.template operator()<8, false>();
  } else if (relu) {
    body.template operator()<16, true>();
  } else {
    body.template operator()<16, false>();
  }
}

// The layout a pass runs in: its main input's, unless the output is a view that
// cannot take it; the other inputs follow.
Layout pass_layout(const Tensor& x, const Tensor& out) { return writable_layout(out, x.layout()); }

class LoopBatchNorm2d final : public BatchNorm2d {
 public:
  explicit LoopBatchNorm2d(const BatchNormSpec& spec) : spec_(spec) {}

  void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& save_mean,
                        Tensor& save_invstd, Tensor* running_mean, Tensor* running_var, float momentum,
                        const Tensor* residual) override {
    if (const Layout layout = pass_layout(x, y); layout != Layout::plain) {
      const Tensor input = x.to_layout(layout);
      const Tensor shortcut = residual ? residual->to_layout(layout) : Tensor();
      y.set_layout(layout);
      float* rm = running_mean ? running_mean->f32() : nullptr;
      float* rv = running_var ? running_var->f32() : nullptr;
      if (layout == Layout::nhwc)
        return channels_last_forward_training(spec_, input.data<float>(), gamma.f32(), beta.f32(), y.data<float>(),
                                              save_mean.f32(), save_invstd.f32(), rm, rv, momentum,
                                              residual ? shortcut.data<float>() : nullptr);
      with_block(layout, spec_.relu, [&]<int K, bool Relu>() {
        blocked_forward_training<K, Relu>(spec_, input.data<float>(), gamma.f32(), beta.f32(), y.data<float>(),
                                          save_mean.f32(), save_invstd.f32(), rm, rv, momentum,
                                          residual ? shortcut.data<float>() : nullptr);
      });
      return;
    }
    y.set_layout(Layout::plain);
    const Planes planes{spec_};
    const Tensor input = x.to_plain();
    const float *xs = input.f32(), *g = gamma.f32(), *b = beta.f32();
    float *ys = y.f32(), *mean_out = save_mean.f32(), *invstd_out = save_invstd.f32();
    float* rm = running_mean ? running_mean->f32() : nullptr;
    float* rv = running_var ? running_var->f32() : nullptr;
    const double count = static_cast<double>(planes.count());
#pragma omp parallel for schedule(static)
    for (std::int64_t c = 0; c < spec_.channels; ++c) {
      // One pass for both moments, shifted by a value of the channel itself: the
      // variance then never cancels against a large mean (the failure of a plain
      // E[x^2] - E[x]^2), and x is read once for the statistics instead of twice.
      const float shift = xs[planes.offset(0, c)];
      double sum = 0.0, squares = 0.0;
      shifted_moments(planes, xs, c, shift, sum, squares);
      const ChannelAffine channel = training_affine(c, shift, sum, squares, count, spec_.epsilon, g, b, momentum,
                                                    mean_out, invstd_out, rm, rv);
      affine(planes, xs, ys, c, channel.a, channel.b);
    }
    plain_output_ops(y, residual);
  }

  void forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                         const Tensor& running_var, Tensor& y, const Tensor* residual) override {
    if (const Layout layout = pass_layout(x, y); layout != Layout::plain) {
      const Tensor input = x.to_layout(layout);
      const Tensor shortcut = residual ? residual->to_layout(layout) : Tensor();
      y.set_layout(layout);
      if (layout == Layout::nhwc)
        return channels_last_forward_inference(spec_, input.data<float>(), gamma.f32(), beta.f32(),
                                               running_mean.f32(), running_var.f32(), y.data<float>(),
                                               residual ? shortcut.data<float>() : nullptr);
      with_block(layout, spec_.relu, [&]<int K, bool Relu>() {
        blocked_forward_inference<K, Relu>(spec_, input.data<float>(), gamma.f32(), beta.f32(), running_mean.f32(),
                                           running_var.f32(), y.data<float>(),
                                           residual ? shortcut.data<float>() : nullptr);
      });
      return;
    }
    y.set_layout(Layout::plain);
    const Planes planes{spec_};
    const Tensor input = x.to_plain();
    const float *xs = input.f32(), *g = gamma.f32(), *b = beta.f32(), *rm = running_mean.f32(), *rv = running_var.f32();
    float* ys = y.f32();
#pragma omp parallel for schedule(static)
    for (std::int64_t c = 0; c < spec_.channels; ++c) {
      const ChannelAffine channel = inference_affine(c, g, b, rm, rv, spec_.epsilon);
      affine(planes, xs, ys, c, channel.a, channel.b);
    }
    plain_output_ops(y, residual);
  }

  void backward_training(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                         const Tensor& save_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                         const Tensor* relu_output) override {
    if (const Layout layout = pass_layout(x, dx); layout != Layout::plain) {
      const Tensor input = x.to_layout(layout), gradient = dy.to_layout(layout);
      const Tensor output = relu_output ? relu_output->to_layout(layout) : Tensor();
      dx.set_layout(layout);
      if (layout == Layout::nhwc)
        return channels_last_backward_training(spec_, input.data<float>(), relu_mask_source(output),
                                               gradient.data<float>(), gamma.f32(), save_mean.f32(),
                                               save_invstd.f32(), dx.data<float>(), dgamma.f32(), dbeta.f32());
      with_block(layout, spec_.backward_masks_relu(), [&]<int K, bool Relu>() {
        blocked_backward_training<K, Relu>(spec_, input.data<float>(), Relu ? output.data<float>() : nullptr,
                                           gradient.data<float>(), gamma.f32(), save_mean.f32(), save_invstd.f32(),
                                           dx.data<float>(), dgamma.f32(), dbeta.f32());
      });
      return;
    }
    dx.set_layout(Layout::plain);
    const Planes planes{spec_};
    const Tensor input = x.to_plain(), gradient = plain_gradient(dy, relu_output);
    const float *xs = input.f32(), *dys = gradient.f32(), *g = gamma.f32(), *mean = save_mean.f32(), *inv = save_invstd.f32();
    float *dxs = dx.f32(), *dg = dgamma.f32(), *db = dbeta.f32();
    const double count = static_cast<double>(planes.count());
#pragma omp parallel for schedule(static)
    for (std::int64_t c = 0; c < spec_.channels; ++c) {
      double sum_dy = 0.0, sum_dy_xmu = 0.0;
      gradient_sums(planes, xs, dys, c, mean[c], sum_dy, sum_dy_xmu);
      // dx = gamma*invstd * (dy - mean(dy) - (x - mean) * invstd^2 * mean(dy*(x - mean))).
      const TrainingGradient coefficients = training_gradient(c, sum_dy, sum_dy_xmu, count, g, inv, dg, db);
      const float scale = coefficients.scale, mean_dy = coefficients.mean_dy, xmu_scale = coefficients.xmu_scale;
      const float m = mean[c];
      for (std::int64_t n = 0; n < spec_.batch; ++n) {
        const float* xp = xs + planes.offset(n, c);
        const float* dp = dys + planes.offset(n, c);
        float* op = dxs + planes.offset(n, c);
#pragma omp simd
        for (std::int64_t i = 0; i < planes.plane(); ++i)
          op[i] = scale * (dp[i] - mean_dy - (xp[i] - m) * xmu_scale);
      }
    }
  }

  void backward_inference(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& running_mean,
                          const Tensor& running_var, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                          const Tensor* relu_output) override {
    if (const Layout layout = pass_layout(x, dx); layout != Layout::plain) {
      const Tensor input = x.to_layout(layout), gradient = dy.to_layout(layout);
      const Tensor output = relu_output ? relu_output->to_layout(layout) : Tensor();
      dx.set_layout(layout);
      if (layout == Layout::nhwc)
        return channels_last_backward_inference(spec_, input.data<float>(), relu_mask_source(output),
                                                gradient.data<float>(), gamma.f32(), running_mean.f32(),
                                                running_var.f32(), dx.data<float>(), dgamma.f32(), dbeta.f32());
      with_block(layout, spec_.backward_masks_relu(), [&]<int K, bool Relu>() {
        blocked_backward_inference<K, Relu>(spec_, input.data<float>(), Relu ? output.data<float>() : nullptr,
                                            gradient.data<float>(), gamma.f32(), running_mean.f32(),
                                            running_var.f32(), dx.data<float>(), dgamma.f32(), dbeta.f32());
      });
      return;
    }
    dx.set_layout(Layout::plain);
    const Planes planes{spec_};
    const Tensor input = x.to_plain(), gradient = plain_gradient(dy, relu_output);
    const float *xs = input.f32(), *dys = gradient.f32(), *g = gamma.f32(), *rm = running_mean.f32(), *rv = running_var.f32();
    float *dxs = dx.f32(), *dg = dgamma.f32(), *db = dbeta.f32();
#pragma omp parallel for schedule(static)
    for (std::int64_t c = 0; c < spec_.channels; ++c) {
      // The running statistics are constants here: y is affine in x.
      double sum_dy = 0.0, sum_dy_xmu = 0.0;
      gradient_sums(planes, xs, dys, c, rm[c], sum_dy, sum_dy_xmu);
      affine(planes, dys, dxs, c, inference_gradient(c, sum_dy, sum_dy_xmu, g, rv, spec_.epsilon, dg, db), 0.0f);
    }
  }

 private:
  // The residual and the ReLU on a plain output: plain tensors (channels no block
  // divides) are rare, so not fused.
  void plain_output_ops(Tensor& y, const Tensor* residual) const {
    if (residual != nullptr) add(y, *residual, y);
    if (spec_.relu) relu_forward(y, y);
  }

  // The fused ReLU's output when backward masks with it, else null.
  const float* relu_mask_source(const Tensor& relu_output) const {
    return spec_.backward_masks_relu() ? relu_output.data<float>() : nullptr;
  }

  // dy in NCHW, through the ReLU's mask when one is fused.
  Tensor plain_gradient(const Tensor& dy, const Tensor* relu_output) const {
    if (!spec_.backward_masks_relu()) return dy.to_plain();
    Tensor masked = Tensor::empty(dy.shape());
    relu_backward(relu_output->to_plain(), dy.to_plain(), masked);
    return masked;
  }

  BatchNormSpec spec_;
};

}  // namespace

std::unique_ptr<BatchNorm2d> make_batch_norm(const BatchNormSpec& spec) {
  return std::make_unique<LoopBatchNorm2d>(spec);
}

}  // namespace bigtrain::kernels::cpu
