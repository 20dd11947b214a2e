#include "kernels/reference/group_norm.hpp"

#include <cmath>
#include <cstdint>
#include <vector>

namespace bigtrain::kernels::reference {

namespace {

// Calls visit(index, channel) for every element of group g of sample n: its
// channels/groups planes, one after the other (contiguous in NCHW).
template <typename Visit>
void for_group(const GroupNormSpec& s, std::int64_t n, std::int64_t g, Visit&& visit) {
  const std::int64_t plane = s.height * s.width;
  const std::int64_t channels_per_group = s.channels / s.groups;
  for (std::int64_t k = 0; k < channels_per_group; ++k) {
    const std::int64_t c = g * channels_per_group + k;
    const std::int64_t base = (n * s.channels + c) * plane;
    for (std::int64_t i = 0; i < plane; ++i) visit(base + i, c);
  }
}

}  // namespace

template <typename T>
void group_norm_forward(const GroupNormSpec& s, const T* x, const T* gamma, const T* beta, T* y, T* save_mean,
                        T* save_invstd) {
  const double count = static_cast<double>(s.group_size());
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t g = 0; g < s.groups; ++g) {
      double sum = 0.0;
      for_group(s, n, g, [&](std::int64_t i, std::int64_t) { sum += x[i]; });
      const double mean = sum / count;
      double squares = 0.0;
      for_group(s, n, g, [&](std::int64_t i, std::int64_t) { squares += (x[i] - mean) * (x[i] - mean); });
      const double invstd = 1.0 / std::sqrt(squares / count + static_cast<double>(s.epsilon));  // biased, as PyTorch
      for_group(s, n, g, [&](std::int64_t i, std::int64_t c) {
        y[i] = static_cast<T>(static_cast<double>(gamma[c]) * (x[i] - mean) * invstd + static_cast<double>(beta[c]));
      });
      save_mean[n * s.groups + g] = static_cast<T>(mean);
      save_invstd[n * s.groups + g] = static_cast<T>(invstd);
    }
}

// With xhat = (x - mean) invstd over a group of M elements and g = dy gamma:
//   dx = invstd (g - mean(g) - xhat mean(g xhat)),  dgamma[c] = sum dy xhat,  dbeta[c] = sum dy.
template <typename T>
void group_norm_backward(const GroupNormSpec& s, const T* x, const T* dy, const T* gamma, const T* save_mean,
                         const T* save_invstd, T* dx, T* dgamma, T* dbeta) {
  for (std::int64_t c = 0; c < s.channels; ++c) dgamma[c] = dbeta[c] = T(0);
  std::vector<double> channel_dgamma(static_cast<std::size_t>(s.channels), 0.0);
  std::vector<double> channel_dbeta(static_cast<std::size_t>(s.channels), 0.0);
  const double count = static_cast<double>(s.group_size());
  for (std::int64_t n = 0; n < s.batch; ++n)
    for (std::int64_t g = 0; g < s.groups; ++g) {
      const double mean = save_mean[n * s.groups + g];
      const double invstd = save_invstd[n * s.groups + g];
      double sum_g = 0.0, sum_g_xhat = 0.0;
      for_group(s, n, g, [&](std::int64_t i, std::int64_t c) {
        const double xhat = (x[i] - mean) * invstd;
        const double scaled = static_cast<double>(dy[i]) * static_cast<double>(gamma[c]);
        sum_g += scaled;
        sum_g_xhat += scaled * xhat;
        channel_dgamma[static_cast<std::size_t>(c)] += static_cast<double>(dy[i]) * xhat;
        channel_dbeta[static_cast<std::size_t>(c)] += static_cast<double>(dy[i]);
      });
      const double mean_g = sum_g / count, mean_g_xhat = sum_g_xhat / count;
      for_group(s, n, g, [&](std::int64_t i, std::int64_t c) {
        const double xhat = (x[i] - mean) * invstd;
        const double scaled = static_cast<double>(dy[i]) * static_cast<double>(gamma[c]);
        dx[i] = static_cast<T>(invstd * (scaled - mean_g - xhat * mean_g_xhat));
      });
    }
  for (std::int64_t c = 0; c < s.channels; ++c) {
    dgamma[c] = static_cast<T>(channel_dgamma[static_cast<std::size_t>(c)]);
    dbeta[c] = static_cast<T>(channel_dbeta[static_cast<std::size_t>(c)]);
  }
}

template void group_norm_forward<float>(const GroupNormSpec&, const float*, const float*, const float*, float*, float*,
                                        float*);
template void group_norm_forward<double>(const GroupNormSpec&, const double*, const double*, const double*, double*,
                                         double*, double*);
template void group_norm_backward<float>(const GroupNormSpec&, const float*, const float*, const float*, const float*,
                                         const float*, float*, float*, float*);
template void group_norm_backward<double>(const GroupNormSpec&, const double*, const double*, const double*,
                                          const double*, const double*, double*, double*, double*);

namespace {

class ReferenceGroupNorm final : public GroupNorm {
 public:
  explicit ReferenceGroupNorm(const GroupNormSpec& spec) : spec_(spec) {}
  void forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& save_mean,
               Tensor& save_invstd) override {
    group_norm_forward(spec_, x.f32(), gamma.f32(), beta.f32(), y.f32(), save_mean.f32(), save_invstd.f32());
  }
  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                const Tensor& save_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    group_norm_backward(spec_, x.f32(), dy.f32(), gamma.f32(), save_mean.f32(), save_invstd.f32(), dx.f32(),
                        dgamma.f32(), dbeta.f32());
  }

 private:
  GroupNormSpec spec_;
};

}  // namespace

std::unique_ptr<GroupNorm> make_group_norm(const GroupNormSpec& spec) {
  return std::make_unique<ReferenceGroupNorm>(spec);
}

}  // namespace bigtrain::kernels::reference
