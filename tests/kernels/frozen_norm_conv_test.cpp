// kernels/frozen_norm_conv.hpp: BatchNorm's gradients from the convolution's raw
// weight gradient equal the ones computed from the convolution's output, which the
// fused forward never stores; the scaled weights are what the fused forward scales
// by. Every backend against formulas evaluated here in double from the reference
// convolution's output.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/conv2d.hpp"
#include "kernels/frozen_norm_conv.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using namespace bigtrain::testing;

constexpr float kEpsilon = 1e-5f;

struct FrozenNormCase {
  Conv2dSpec spec;
  Tensor x, weight, gamma, mean, var, dz;  // host
};

// Activations after a ReLU (positive, mean ~1) through weights with a positive mean:
// each output channel sits far from 0 with a small spread, as in a trained network,
// and the running statistics are the channel's own, so (u - mean) is small against u
// and the two terms of dgamma nearly cancel. Channel 1 has gamma = 0 (its weight
// gradient vanishes, its gamma gradient does not); channel 2 statistics far off.
FrozenNormCase make_case() {
  FrozenNormCase c;
  c.spec.batch = 2, c.spec.in_channels = 3, c.spec.out_channels = 4, c.spec.in_h = 7, c.spec.in_w = 6;
  c.spec.kernel_h = c.spec.kernel_w = 3, c.spec.pad_h = c.spec.pad_w = 1;
  c.x = random_tensor(c.spec.input_shape(), 1, 0.5f, 1.5f);
  c.weight = random_tensor(c.spec.weight_shape(), 2, 0.2f, 0.6f);
  Tensor u = Tensor::empty(c.spec.output_shape());
  make_conv2d(Backend::reference, c.spec)->forward(c.x, c.weight, nullptr, u);
  const std::int64_t channels = c.spec.out_channels, plane = c.spec.out_h() * c.spec.out_w();
  c.mean = Tensor::empty({channels});
  c.var = Tensor::empty({channels});
  for (std::int64_t k = 0; k < channels; ++k) {
    double sum = 0.0, squares = 0.0;
    for (std::int64_t n = 0; n < c.spec.batch; ++n)
      for (std::int64_t p = 0; p < plane; ++p) {
        const double v = u.f32()[(n * channels + k) * plane + p];
        sum += v, squares += v * v;
      }
    const double count = static_cast<double>(c.spec.batch * plane), m = sum / count;
    c.mean.f32()[k] = static_cast<float>(m);
    c.var.f32()[k] = static_cast<float>(squares / count - m * m);
  }
  c.mean.f32()[2] = -3.0f, c.var.f32()[2] = 40.0f;
  c.gamma = random_tensor({channels}, 3, 0.5f, 1.5f);
  c.gamma.f32()[1] = 0.0f;
  c.dz = random_tensor(c.spec.output_shape(), 4);
  return c;
}

double inverse_std(const FrozenNormCase& c, std::int64_t k) {
  return 1.0 / std::sqrt(static_cast<double>(c.var.f32()[k]) + kEpsilon);
}

class FrozenNormConv : public ::testing::TestWithParam<Backend> {};

TEST_P(FrozenNormConv, GradientsEqualBatchNormsOnTheConvolutionsOutput) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const FrozenNormCase c = make_case();
  const std::int64_t channels = c.spec.out_channels, plane = c.spec.out_h() * c.spec.out_w();

  // Expected, from u: dgamma = sum dz (u - mean) / std, dbeta = sum dz, and the
  // weight's gradient through BatchNorm's scale, conv_backward_weights(x, s dz).
  Tensor u = Tensor::empty(c.spec.output_shape());
  make_conv2d(Backend::reference, c.spec)->forward(c.x, c.weight, nullptr, u);
  std::vector<double> dgamma(channels), dbeta(channels);
  Tensor scaled_dz = Tensor::empty(c.spec.output_shape());
  for (std::int64_t n = 0; n < c.spec.batch; ++n)
    for (std::int64_t k = 0; k < channels; ++k) {
      const double invstd = inverse_std(c, k);
      const auto s = static_cast<float>(c.gamma.f32()[k] * invstd);
      for (std::int64_t p = 0; p < plane; ++p) {
        const std::int64_t at = (n * channels + k) * plane + p;
        const double dz = c.dz.f32()[at];
        dbeta[k] += dz;
        dgamma[k] += dz * (static_cast<double>(u.f32()[at]) - c.mean.f32()[k]) * invstd;
        scaled_dz.f32()[at] = s * c.dz.f32()[at];
      }
    }
  Tensor dweight_expected = Tensor::empty(c.spec.weight_shape());
  make_conv2d(Backend::reference, c.spec)->backward_weights(c.x, scaled_dz, dweight_expected, nullptr);

  // Actual: the backend's own convolution gives the raw weight gradient and dz's
  // sums (its bias gradient), as net::Conv2d's fused backward calls it.
  Conv2dSpec with_bias = c.spec;
  with_bias.bias = true;
  Tensor raw = on_backend(Tensor::empty(c.spec.weight_shape()), backend);
  Tensor dz_sum = on_backend(Tensor::empty({channels}), backend);
  make_conv2d(backend, with_bias)
      ->backward_weights(on_backend(c.x, backend), on_backend(c.dz, backend), raw, &dz_sum);
  const Tensor gamma = on_backend(c.gamma, backend), mean = on_backend(c.mean, backend),
               var = on_backend(c.var, backend), weight = on_backend(c.weight, backend);
  const FrozenNorm norm{&gamma, &mean, &var, kEpsilon};
  Tensor dweight = nan_tensor(c.spec.weight_shape(), backend), dgamma_actual = nan_tensor({channels}, backend),
         dbeta_actual = nan_tensor({channels}, backend);
  frozen_norm_gradients(backend, norm, weight, raw, dz_sum, dweight, dgamma_actual, dbeta_actual);

  // Sums of 84 products in float32 on both sides: a few eps_f32 of the rms.
  expect_close(to_doubles(dweight), to_doubles(dweight_expected), c.spec.weight_shape(), {1e-5, 1e-7}, "dweight");
  expect_close(to_doubles(dbeta_actual), dbeta, {channels}, {1e-5, 1e-7}, "dbeta");
  // <W, G> is ~ mean * sum dz, of which dgamma keeps the small remainder: G's float32
  // rounding, relative to the terms, grows by |mean| / |u - mean| (~30 here).
  expect_close(to_doubles(dgamma_actual), dgamma, {channels}, {2e-4, 1e-6}, "dgamma");
  EXPECT_NE(dgamma[1], 0.0) << "gamma = 0 still has a gradient";
  for (std::int64_t i = 0; i < dweight.numel() / channels; ++i)
    EXPECT_EQ(dweight.to(Device::cpu()).f32()[dweight.numel() / channels + i], 0.0f) << "channel 1 has gamma 0";

  // Accumulating, as into a parameter's .grad: x + x is exact, so twice the result.
  Tensor dweight_sum = dweight.clone(), dgamma_sum = dgamma_actual.clone(), dbeta_sum = dbeta_actual.clone();
  frozen_norm_gradients(backend, norm, weight, raw, dz_sum, dweight_sum, dgamma_sum, dbeta_sum, /*accumulate=*/true);
  for (const auto& [sum, once, what] : {std::tuple{&dweight_sum, &dweight, "dweight"},
                                        std::tuple{&dgamma_sum, &dgamma_actual, "dgamma"},
                                        std::tuple{&dbeta_sum, &dbeta_actual, "dbeta"}}) {
    std::vector<float> doubled = once->to_vector();
    for (float& v : doubled) v *= 2.0f;
    EXPECT_EQ(sum->to_vector(), doubled) << what << " accumulated";
  }

  // In place, as net::Conv2d calls it: the raw gradient becomes the weight's.
  Tensor dgamma_again = on_backend(Tensor::empty({channels}), backend),
         dbeta_again = on_backend(Tensor::empty({channels}), backend);
  frozen_norm_gradients(backend, norm, weight, raw, dz_sum, raw, dgamma_again, dbeta_again);
  EXPECT_EQ(raw.to_vector(), dweight.to_vector());
  EXPECT_EQ(dgamma_again.to_vector(), dgamma_actual.to_vector());
}

TEST_P(FrozenNormConv, ScaledWeightsAreTheFusedForwardsScale) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const FrozenNormCase c = make_case();
  const Tensor gamma = on_backend(c.gamma, backend), mean = on_backend(c.mean, backend),
               var = on_backend(c.var, backend);
  Tensor scaled = nan_tensor(c.spec.weight_shape(), backend);
  frozen_norm_scale_weights(backend, {&gamma, &mean, &var, kEpsilon}, on_backend(c.weight, backend), scaled);
  const std::vector<float> actual = scaled.to_vector();
  const std::int64_t per_channel = c.weight.numel() / c.spec.out_channels;
  for (std::int64_t i = 0; i < c.weight.numel(); ++i) {
    const std::int64_t k = i / per_channel;
    // The scale rounded to float once, as kernels/cpu/conv2d.cpp's fused epilogue rounds it.
    const auto s = static_cast<float>(c.gamma.f32()[k] * inverse_std(c, k));
    ASSERT_EQ(actual[static_cast<std::size_t>(i)], s * c.weight.f32()[i]) << "element " << i;
  }
}

TEST_P(FrozenNormConv, WrongArgumentsAreNamed) {
  const Backend backend = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const Tensor weight = on_backend(random_tensor({4, 3, 3, 3}, 1), backend);
  const Tensor three = on_backend(random_tensor({3}, 2), backend), four = on_backend(random_tensor({4}, 3), backend);
  Tensor scaled = on_backend(Tensor::empty({4, 3, 3, 3}), backend);
  const auto error_of = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_NE(error_of([&] { frozen_norm_scale_weights(backend, {&three, &four, &four}, weight, scaled); })
                .find("`gamma`"),
            std::string::npos);
  EXPECT_NE(error_of([&] { frozen_norm_scale_weights(backend, {&four, &four, &three}, weight, scaled); })
                .find("`running_var`"),
            std::string::npos);
  Tensor wrong_dweight = on_backend(Tensor::empty({4, 3, 3, 1}), backend);
  EXPECT_NE(error_of([&] {
              frozen_norm_gradients(backend, {&four, &four, &four}, weight, scaled, four, wrong_dweight, scaled, scaled);
            }).find("`dweight`"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Backends, FrozenNormConv, ::testing::ValuesIn(all_backends()), backend_param_name);

}  // namespace
}  // namespace bigtrain::kernels
