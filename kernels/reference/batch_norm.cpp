#include "kernels/reference/batch_norm.hpp"

#include <cmath>
#include <cstdint>

namespace bigtrain::kernels::reference {

namespace {

// Calls visit(index) for every element of channel c: N planes of H*W.
template <typename Visit>
void for_channel(const BatchNormSpec& s, std::int64_t c, Visit&& visit) {
  const std::int64_t plane = s.height * s.width;
  for (std::int64_t n = 0; n < s.batch; ++n) {
    const std::int64_t base = (n * s.channels + c) * plane;
    for (std::int64_t i = 0; i < plane; ++i) visit(base + i);
  }
}

std::int64_t per_channel(const BatchNormSpec& s) { return s.batch * s.height * s.width; }

// y = gamma * (x - mean) * invstd + beta, and the two gradient sums of the backward pass.
template <typename T>
void normalise(const BatchNormSpec& s, std::int64_t c, const T* x, double mean, double invstd, double gamma,
               double beta, T* y) {
  for_channel(s, c, [&](std::int64_t i) { y[i] = static_cast<T>(gamma * (x[i] - mean) * invstd + beta); });
}

template <typename T>
void gradient_sums(const BatchNormSpec& s, std::int64_t c, const T* x, const T* dy, double mean, double invstd,
                   double& sum_dy, double& sum_dy_xhat) {
  sum_dy = 0.0, sum_dy_xhat = 0.0;
  for_channel(s, c, [&](std::int64_t i) {
    sum_dy += dy[i];
    sum_dy_xhat += static_cast<double>(dy[i]) * (x[i] - mean) * invstd;
  });
}

}  // namespace

template <typename T>
void batch_norm_forward_training(const BatchNormSpec& s, const T* x, const T* gamma, const T* beta, T* y,
                                 T* save_mean, T* save_invstd, T* running_mean, T* running_var, double momentum) {
  const double count = static_cast<double>(per_channel(s));
  for (std::int64_t c = 0; c < s.channels; ++c) {
    double sum = 0.0;
    for_channel(s, c, [&](std::int64_t i) { sum += x[i]; });
    const double mean = sum / count;
    double squares = 0.0;
    for_channel(s, c, [&](std::int64_t i) { squares += (x[i] - mean) * (x[i] - mean); });
    const double biased_var = squares / count;  // normalisation uses the biased variance, as PyTorch
    const double invstd = 1.0 / std::sqrt(biased_var + static_cast<double>(s.epsilon));
    normalise(s, c, x, mean, invstd, static_cast<double>(gamma[c]), static_cast<double>(beta[c]), y);
    save_mean[c] = static_cast<T>(mean);
    save_invstd[c] = static_cast<T>(invstd);
    if (running_mean != nullptr)
      running_mean[c] = static_cast<T>((1.0 - momentum) * running_mean[c] + momentum * mean);
    if (running_var != nullptr) {
      const double unbiased_var = squares / (count - 1.0);  // the running estimate is unbiased, as PyTorch
      running_var[c] = static_cast<T>((1.0 - momentum) * running_var[c] + momentum * unbiased_var);
    }
  }
}

template <typename T>
void batch_norm_forward_inference(const BatchNormSpec& s, const T* x, const T* gamma, const T* beta,
                                  const T* running_mean, const T* running_var, T* y) {
  for (std::int64_t c = 0; c < s.channels; ++c) {
    const double invstd = 1.0 / std::sqrt(static_cast<double>(running_var[c]) + static_cast<double>(s.epsilon));
    normalise(s, c, x, static_cast<double>(running_mean[c]), invstd, static_cast<double>(gamma[c]),
              static_cast<double>(beta[c]), y);
  }
}

template <typename T>
void batch_norm_backward_training(const BatchNormSpec& s, const T* x, const T* dy, const T* gamma,
                                  const T* save_mean, const T* save_invstd, T* dx, T* dgamma, T* dbeta) {
  const double count = static_cast<double>(per_channel(s));
  for (std::int64_t c = 0; c < s.channels; ++c) {
    const double mean = save_mean[c], invstd = save_invstd[c];
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    gradient_sums(s, c, x, dy, mean, invstd, sum_dy, sum_dy_xhat);
    // d/dx of gamma*xhat through the batch mean and variance:
    // dx = gamma*invstd * (dy - mean(dy) - xhat * mean(dy*xhat)).
    const double scale = static_cast<double>(gamma[c]) * invstd;
    for_channel(s, c, [&](std::int64_t i) {
      const double xhat = (x[i] - mean) * invstd;
      dx[i] = static_cast<T>(scale * (dy[i] - sum_dy / count - xhat * sum_dy_xhat / count));
    });
    dgamma[c] = static_cast<T>(sum_dy_xhat);
    dbeta[c] = static_cast<T>(sum_dy);
  }
}

template <typename T>
void batch_norm_backward_inference(const BatchNormSpec& s, const T* x, const T* dy, const T* gamma,
                                   const T* running_mean, const T* running_var, T* dx, T* dgamma, T* dbeta) {
  for (std::int64_t c = 0; c < s.channels; ++c) {
    const double mean = running_mean[c];
    const double invstd = 1.0 / std::sqrt(static_cast<double>(running_var[c]) + static_cast<double>(s.epsilon));
    double sum_dy = 0.0, sum_dy_xhat = 0.0;
    gradient_sums(s, c, x, dy, mean, invstd, sum_dy, sum_dy_xhat);
    // The statistics are constants: y is an affine function of x.
    const double scale = static_cast<double>(gamma[c]) * invstd;
    for_channel(s, c, [&](std::int64_t i) { dx[i] = static_cast<T>(scale * dy[i]); });
    dgamma[c] = static_cast<T>(sum_dy_xhat);
    dbeta[c] = static_cast<T>(sum_dy);
  }
}

#define BIGTRAIN_INSTANTIATE(T)                                                                                  \
  template void batch_norm_forward_training<T>(const BatchNormSpec&, const T*, const T*, const T*, T*, T*, T*,  \
                                               T*, T*, double);                                                 \
  template void batch_norm_forward_inference<T>(const BatchNormSpec&, const T*, const T*, const T*, const T*,   \
                                                const T*, T*);                                                  \
  template void batch_norm_backward_training<T>(const BatchNormSpec&, const T*, const T*, const T*, const T*,   \
                                                const T*, T*, T*, T*);                                          \
  template void batch_norm_backward_inference<T>(const BatchNormSpec&, const T*, const T*, const T*, const T*,  \
                                                 const T*, T*, T*, T*);
BIGTRAIN_INSTANTIATE(float)
BIGTRAIN_INSTANTIATE(double)
#undef BIGTRAIN_INSTANTIATE

namespace {

class ReferenceBatchNorm2d final : public BatchNorm2d {
 public:
  explicit ReferenceBatchNorm2d(const BatchNormSpec& spec) : spec_(spec) {}

  void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& save_mean,
                        Tensor& save_invstd, Tensor* running_mean, Tensor* running_var, float momentum,
                        const Tensor* /*residual: spec.residual never reaches here*/) override {
    batch_norm_forward_training(spec_, x.f32(), gamma.f32(), beta.f32(), y.f32(), save_mean.f32(), save_invstd.f32(),
                                running_mean ? running_mean->f32() : nullptr,
                                running_var ? running_var->f32() : nullptr, static_cast<double>(momentum));
  }
  void forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                         const Tensor& running_var, Tensor& y,
                         const Tensor* /*residual: spec.residual never reaches here*/) override {
    batch_norm_forward_inference(spec_, x.f32(), gamma.f32(), beta.f32(), running_mean.f32(), running_var.f32(),
                                 y.f32());
  }
  void backward_training(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                         const Tensor& save_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                         const Tensor* /*relu_output: spec.relu never reaches here*/) override {
    batch_norm_backward_training(spec_, x.f32(), dy.f32(), gamma.f32(), save_mean.f32(), save_invstd.f32(), dx.f32(),
                                 dgamma.f32(), dbeta.f32());
  }
  void backward_inference(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& running_mean,
                          const Tensor& running_var, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                         const Tensor* /*relu_output: spec.relu never reaches here*/) override {
    batch_norm_backward_inference(spec_, x.f32(), dy.f32(), gamma.f32(), running_mean.f32(), running_var.f32(),
                                  dx.f32(), dgamma.f32(), dbeta.f32());
  }

 private:
  BatchNormSpec spec_;
};

}  // namespace

std::unique_ptr<BatchNorm2d> make_batch_norm(const BatchNormSpec& spec) {
  return std::make_unique<ReferenceBatchNorm2d>(spec);
}

}  // namespace bigtrain::kernels::reference
