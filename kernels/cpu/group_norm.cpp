#include "kernels/cpu/group_norm.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/moment_sums.hpp"

namespace bigtrain::kernels::cpu {

// In NCHW a (sample, group) is one contiguous run of channels/groups planes, so the
// statistics are one vectorisable sum over one range (moment_sums.hpp), and the
// affine and the gradient run per (sample, channel) plane, every channel of a
// sample independent (parallel, deterministic).

namespace {

struct Layout {
  const GroupNormSpec& spec;
  std::int64_t plane() const { return spec.height * spec.width; }
  std::int64_t channels_per_group() const { return spec.channels / spec.groups; }
  std::int64_t plane_offset(std::int64_t n, std::int64_t c) const { return (n * spec.channels + c) * plane(); }
  std::int64_t group_offset(std::int64_t n, std::int64_t g) const {
    return plane_offset(n, g * channels_per_group());
  }
  std::int64_t group_of(std::int64_t c) const { return c / channels_per_group(); }
};

class LoopGroupNorm final : public GroupNorm {
 public:
  explicit LoopGroupNorm(const GroupNormSpec& spec) : spec_(spec) {}

  void forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& save_mean,
               Tensor& save_invstd) override {
    const Layout layout{spec_};
    // Groups of channels are NCHW planes here: a blocked input is read through its plain form.
    const Tensor input = x.to_plain();
    y.set_layout(bigtrain::Layout::plain);
    const float *xs = input.f32(), *g = gamma.f32(), *b = beta.f32();
    float *ys = y.f32(), *mean_out = save_mean.f32(), *invstd_out = save_invstd.f32();
    const std::int64_t units = spec_.batch * spec_.groups;
    const std::int64_t count = spec_.group_size();
#pragma omp parallel for schedule(static)
    for (std::int64_t unit = 0; unit < units; ++unit) {
      const std::int64_t n = unit / spec_.groups, group = unit % spec_.groups;
      const float* p = xs + layout.group_offset(n, group);
      // Shifted by a value of the group itself, so the variance never cancels against a large mean.
      double sum = 0.0, squares = 0.0;
      add_shifted_moments(p, count, p[0], sum, squares);
      const double shifted_mean = sum / static_cast<double>(count);
      const double biased_var = std::max(0.0, squares - sum * shifted_mean) / static_cast<double>(count);
      mean_out[unit] = static_cast<float>(p[0] + shifted_mean);
      invstd_out[unit] = static_cast<float>(1.0 / std::sqrt(biased_var + static_cast<double>(spec_.epsilon)));
    }
    const std::int64_t planes = spec_.batch * spec_.channels;
#pragma omp parallel for schedule(static)
    for (std::int64_t index = 0; index < planes; ++index) {
      const std::int64_t n = index / spec_.channels, c = index % spec_.channels;
      const std::int64_t unit = n * spec_.groups + layout.group_of(c);
      const double a = static_cast<double>(g[c]) * invstd_out[unit];
      const auto scale = static_cast<float>(a);
      const auto shift = static_cast<float>(b[c] - mean_out[unit] * a);
      const float* ip = xs + layout.plane_offset(n, c);
      float* op = ys + layout.plane_offset(n, c);
#pragma omp simd
      for (std::int64_t i = 0; i < layout.plane(); ++i) op[i] = scale * ip[i] + shift;
    }
  }

  // dx = invstd (gamma dy - mean_group(gamma dy) - xhat mean_group(gamma dy xhat)).
  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                const Tensor& save_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    const Layout layout{spec_};
    const Tensor input = x.to_plain(), gradient = dy.to_plain();
    dx.set_layout(bigtrain::Layout::plain);
    const float *xs = input.f32(), *dys = gradient.f32(), *g = gamma.f32(), *mean = save_mean.f32(), *inv = save_invstd.f32();
    float *dxs = dx.f32(), *dg = dgamma.f32(), *db = dbeta.f32();
    const std::int64_t planes = spec_.batch * spec_.channels;
    // Per plane: sum dy and sum dy (x - group mean), shared by the parameter and input gradients.
    std::vector<double> plane_dy(static_cast<std::size_t>(planes)), plane_dy_xmu(static_cast<std::size_t>(planes));
#pragma omp parallel for schedule(static)
    for (std::int64_t index = 0; index < planes; ++index) {
      const std::int64_t n = index / spec_.channels, c = index % spec_.channels;
      const std::int64_t offset = layout.plane_offset(n, c);
      double& sum_dy = plane_dy[static_cast<std::size_t>(index)];
      double& sum_dy_xmu = plane_dy_xmu[static_cast<std::size_t>(index)];
      sum_dy = 0.0, sum_dy_xmu = 0.0;
      add_gradient_sums(xs + offset, dys + offset, layout.plane(), mean[n * spec_.groups + layout.group_of(c)], sum_dy,
                        sum_dy_xmu);
    }
#pragma omp parallel for schedule(static)
    for (std::int64_t c = 0; c < spec_.channels; ++c) {
      double sum_dy = 0.0, sum_dy_xhat = 0.0;
      for (std::int64_t n = 0; n < spec_.batch; ++n) {
        const auto index = static_cast<std::size_t>(n * spec_.channels + c);
        sum_dy += plane_dy[index];
        sum_dy_xhat += plane_dy_xmu[index] * inv[n * spec_.groups + layout.group_of(c)];
      }
      dg[c] = static_cast<float>(sum_dy_xhat);
      db[c] = static_cast<float>(sum_dy);
    }
    const double count = static_cast<double>(spec_.group_size());
    const std::int64_t units = spec_.batch * spec_.groups;
#pragma omp parallel for schedule(static)
    for (std::int64_t unit = 0; unit < units; ++unit) {
      const std::int64_t n = unit / spec_.groups, group = unit % spec_.groups;
      const double invstd = inv[unit];
      double sum_g = 0.0, sum_g_xmu = 0.0;
      for (std::int64_t k = 0; k < layout.channels_per_group(); ++k) {
        const std::int64_t c = group * layout.channels_per_group() + k;
        const auto index = static_cast<std::size_t>(n * spec_.channels + c);
        sum_g += g[c] * plane_dy[index];
        sum_g_xmu += g[c] * plane_dy_xmu[index];
      }
      const auto mean_g = static_cast<float>(sum_g / count);
      const auto xmu_scale = static_cast<float>(sum_g_xmu * invstd * invstd / count);
      const float m = mean[unit];
      for (std::int64_t k = 0; k < layout.channels_per_group(); ++k) {
        const std::int64_t c = group * layout.channels_per_group() + k;
        const std::int64_t offset = layout.plane_offset(n, c);
        const float* xp = xs + offset;
        const float* dp = dys + offset;
        float* op = dxs + offset;
        const float gc = g[c];
        const auto s = static_cast<float>(invstd);
#pragma omp simd
        for (std::int64_t i = 0; i < layout.plane(); ++i) op[i] = s * (gc * dp[i] - mean_g - (xp[i] - m) * xmu_scale);
      }
    }
  }

 private:
  GroupNormSpec spec_;
};

}  // namespace

std::unique_ptr<GroupNorm> make_group_norm(const GroupNormSpec& spec) { return std::make_unique<LoopGroupNorm>(spec); }

}  // namespace bigtrain::kernels::cpu
