#include "kernels/reference/conv2d.hpp"

#include <cstdint>
#include <vector>

#include "kernels/reference/batch_norm.hpp"
#include "kernels/reference/elementwise.hpp"
#include "kernels/reference/round_to_dtype.hpp"

namespace bigtrain::kernels::reference {

namespace {

// Which index every thread owns exclusively, so parallel loops never write the same
// sum: the forward pass writes y[n][o], backward-data writes dx[n][...] (any o),
// backward-weights writes dw[o][...] (any n). Each sum still adds its terms in one
// fixed order whatever the thread count, so results are deterministic.
enum class Owned { batch_and_out_channel, batch, out_channel };

// Calls term(x_index, w_index, y_index) for every product x*w that enters an output,
// i.e. the definition of a grouped, strided, padded, dilated cross-correlation.
// Forward and both backward passes are sums over exactly these terms, so they
// cannot disagree about indexing.
template <Owned owned, typename Term>
void for_each_term(const Conv2dSpec& s, Term&& term) {
  const std::int64_t oh_n = s.out_h(), ow_n = s.out_w();
  const std::int64_t in_per_group = s.in_channels / s.groups, out_per_group = s.out_channels / s.groups;
  auto terms_of = [&](std::int64_t n, std::int64_t o) {
    const std::int64_t group = o / out_per_group;
    for (std::int64_t oh = 0; oh < oh_n; ++oh)
      for (std::int64_t ow = 0; ow < ow_n; ++ow) {
        const std::int64_t y_index = ((n * s.out_channels + o) * oh_n + oh) * ow_n + ow;
        for (std::int64_t ci = 0; ci < in_per_group; ++ci) {
          const std::int64_t c = group * in_per_group + ci;
          for (std::int64_t kh = 0; kh < s.kernel_h; ++kh) {
            const std::int64_t ih = oh * s.stride_h - s.pad_h + kh * s.dilation_h;
            if (ih < 0 || ih >= s.in_h) continue;  // zero padding contributes nothing
            for (std::int64_t kw = 0; kw < s.kernel_w; ++kw) {
              const std::int64_t iw = ow * s.stride_w - s.pad_w + kw * s.dilation_w;
              if (iw < 0 || iw >= s.in_w) continue;
              const std::int64_t x_index = ((n * s.in_channels + c) * s.in_h + ih) * s.in_w + iw;
              const std::int64_t w_index = ((o * in_per_group + ci) * s.kernel_h + kh) * s.kernel_w + kw;
              term(x_index, w_index, y_index);
            }
          }
        }
      }
  };
  // Threads only pay off on whole-network shapes; small calls (finite-difference
  // checks make thousands) would spend more on waking the team than on the sums.
  const bool parallel = shape_numel(s.output_shape()) * in_per_group * s.kernel_h * s.kernel_w > (1 << 22);
  if constexpr (owned == Owned::batch_and_out_channel) {
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
    for (std::int64_t n = 0; n < s.batch; ++n)
      for (std::int64_t o = 0; o < s.out_channels; ++o) terms_of(n, o);
  } else if constexpr (owned == Owned::batch) {
#pragma omp parallel for schedule(static) if (parallel)
    for (std::int64_t n = 0; n < s.batch; ++n)
      for (std::int64_t o = 0; o < s.out_channels; ++o) terms_of(n, o);
  } else {
#pragma omp parallel for schedule(static) if (parallel)
    for (std::int64_t o = 0; o < s.out_channels; ++o)
      for (std::int64_t n = 0; n < s.batch; ++n) terms_of(n, o);
  }
}

template <typename T>
void store(const std::vector<double>& sums, T* out) {
  for (std::size_t i = 0; i < sums.size(); ++i) out[i] = static_cast<T>(sums[i]);
}

}  // namespace

template <typename T>
void conv2d_forward(const Conv2dSpec& s, const T* x, const T* w, const T* b, T* y) {
  const std::int64_t plane = s.out_h() * s.out_w();
  std::vector<double> sums(static_cast<std::size_t>(shape_numel(s.output_shape())), 0.0);
  if (b != nullptr)
    for (std::size_t i = 0; i < sums.size(); ++i) sums[i] = b[(static_cast<std::int64_t>(i) / plane) % s.out_channels];
  for_each_term<Owned::batch_and_out_channel>(s, [&](std::int64_t xi, std::int64_t wi, std::int64_t yi) {
    sums[yi] += static_cast<double>(x[xi]) * static_cast<double>(w[wi]);
  });
  store(sums, y);
}

template <typename T>
void conv2d_backward_data(const Conv2dSpec& s, const T* dy, const T* w, T* dx) {
  std::vector<double> sums(static_cast<std::size_t>(shape_numel(s.input_shape())), 0.0);
  for_each_term<Owned::batch>(s, [&](std::int64_t xi, std::int64_t wi, std::int64_t yi) {
    sums[xi] += static_cast<double>(dy[yi]) * static_cast<double>(w[wi]);
  });
  store(sums, dx);
}

template <typename T>
void conv2d_backward_weights(const Conv2dSpec& s, const T* x, const T* dy, T* dw, T* db) {
  std::vector<double> sums(static_cast<std::size_t>(shape_numel(s.weight_shape())), 0.0);
  for_each_term<Owned::out_channel>(s, [&](std::int64_t xi, std::int64_t wi, std::int64_t yi) {
    sums[wi] += static_cast<double>(x[xi]) * static_cast<double>(dy[yi]);
  });
  store(sums, dw);
  if (db != nullptr) {
    const std::int64_t plane = s.out_h() * s.out_w();
    std::vector<double> bias_sums(static_cast<std::size_t>(s.out_channels), 0.0);
    for (std::int64_t i = 0; i < shape_numel(s.output_shape()); ++i) bias_sums[(i / plane) % s.out_channels] += dy[i];
    store(bias_sums, db);
  }
}

template void conv2d_forward<float>(const Conv2dSpec&, const float*, const float*, const float*, float*);
template void conv2d_forward<double>(const Conv2dSpec&, const double*, const double*, const double*, double*);
template void conv2d_backward_data<float>(const Conv2dSpec&, const float*, const float*, float*);
template void conv2d_backward_data<double>(const Conv2dSpec&, const double*, const double*, double*);
template void conv2d_backward_weights<float>(const Conv2dSpec&, const float*, const float*, float*, float*);
template void conv2d_backward_weights<double>(const Conv2dSpec&, const double*, const double*, double*, double*);

namespace {

class ReferenceConv2d final : public Conv2d {
 public:
  explicit ReferenceConv2d(const Conv2dSpec& spec) : spec_(spec) {}

  // The bias is added in float32 unrounded (cuDNN adds it to the float32 output).
  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    conv2d_forward(spec_, in(x).get(), in(weight).get(), bias ? bias->f32() : nullptr, y.f32());
  }
  // The separate layers' own reference loops, in their order on the float32 output:
  // fused and unfused results are bit-identical here, so the exactness tests that
  // compare a fused pass with a kept one (streaming, two-pass) stay exact.
  void forward_fused(const Tensor& x, const Tensor& weight, const Tensor* bias, const ConvEpilogueInputs& epilogue,
                     Tensor& y) override {
    forward(x, weight, bias, y);
    const ConvEpilogue& steps = spec_.epilogue;
    if (steps.batch_norm) {
      const BatchNormSpec bn{spec_.batch, spec_.out_channels, spec_.out_h(), spec_.out_w(), steps.bn_epsilon};
      batch_norm_forward_inference<float>(bn, y.f32(), epilogue.gamma->f32(), epilogue.beta->f32(),
                                          epilogue.running_mean->f32(), epilogue.running_var->f32(), y.f32());
    }
    if (steps.residual) add(y, *epilogue.residual, y);
    if (steps.relu) relu_forward(y, y);
  }
  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    conv2d_backward_data(spec_, in(dy).get(), in(weight).get(), dx.f32());
  }
  // dbias sums dy in float32 (as cuDNN's backward-bias on the float32 gradient);
  // dweight sums products of the rounded x and dy.
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    conv2d_backward_weights<float>(spec_, in(x).get(), in(dy).get(), dweight.f32(), nullptr);
    if (dbias != nullptr) {
      const std::int64_t plane = spec_.out_h() * spec_.out_w();
      std::vector<double> sums(static_cast<std::size_t>(spec_.out_channels), 0.0);
      const float* g = dy.f32();
      for (std::int64_t i = 0; i < dy.numel(); ++i) sums[static_cast<std::size_t>((i / plane) % spec_.out_channels)] += g[i];
      store(sums, dbias->f32());
    }
  }

 private:
  RoundedOperand in(const Tensor& t) const { return RoundedOperand(t, spec_.compute_dtype); }
  Conv2dSpec spec_;
};

}  // namespace

std::unique_ptr<Conv2d> make_conv2d(const Conv2dSpec& spec) { return std::make_unique<ReferenceConv2d>(spec); }

}  // namespace bigtrain::kernels::reference
