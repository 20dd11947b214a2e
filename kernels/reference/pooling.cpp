#include "kernels/reference/pooling.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/core/error.hpp"

namespace bigtrain::kernels::reference {
namespace {

// One pooling window clipped to the input, and PyTorch's average divisor for it.
struct Window {
  std::int64_t h0, h1, w0, w1;  // [h0, h1) x [w0, w1) inside the input
  std::int64_t divisor;
};

Window window_at(const Pool2dSpec& spec, std::int64_t oh, std::int64_t ow) {
  std::int64_t h0 = oh * spec.stride_h - spec.pad_h, w0 = ow * spec.stride_w - spec.pad_w;
  std::int64_t h1 = std::min(h0 + spec.kernel_h, spec.in_h + spec.pad_h);
  std::int64_t w1 = std::min(w0 + spec.kernel_w, spec.in_w + spec.pad_w);
  const std::int64_t padded_size = (h1 - h0) * (w1 - w0);
  h0 = std::max<std::int64_t>(h0, 0);
  w0 = std::max<std::int64_t>(w0, 0);
  h1 = std::min(h1, spec.in_h);
  w1 = std::min(w1, spec.in_w);
  return {h0, h1, w0, w1, spec.count_include_pad ? padded_size : (h1 - h0) * (w1 - w0)};
}

class ReferencePool2d final : public Pool2d {
 public:
  explicit ReferencePool2d(const Pool2dSpec& spec) : spec_(spec) {}

  Tensor forward(const Tensor& x, Tensor& y, bool training) override {
    const std::int64_t planes = spec_.batch * spec_.channels, in_plane = spec_.in_h * spec_.in_w;
    const std::int64_t out_h = spec_.out_h(), out_w = spec_.out_w();
    const float* in = x.f32();
    float* out = y.f32();
    Tensor argmax;
    if (spec_.kind == PoolKind::max && training) argmax = Tensor::empty(spec_.output_shape(), DType::i32);
    for (std::int64_t plane = 0; plane < planes; ++plane) {
      const float* src = in + plane * in_plane;
      for (std::int64_t oh = 0; oh < out_h; ++oh) {
        for (std::int64_t ow = 0; ow < out_w; ++ow) {
          const Window win = window_at(spec_, oh, ow);
          const std::int64_t o = (plane * out_h + oh) * out_w + ow;
          if (spec_.kind == PoolKind::max) {
            // PyTorch's rule: the first maximum in row-major order wins ties, and a
            // NaN wins over any number.
            float best = -std::numeric_limits<float>::infinity();
            std::int64_t best_index = win.h0 * spec_.in_w + win.w0;
            for (std::int64_t h = win.h0; h < win.h1; ++h) {
              for (std::int64_t w = win.w0; w < win.w1; ++w) {
                const float value = src[h * spec_.in_w + w];
                if (value > best || std::isnan(value)) {
                  best = value;
                  best_index = h * spec_.in_w + w;
                }
              }
            }
            out[o] = best;
            if (argmax.defined()) argmax.data<std::int32_t>()[o] = static_cast<std::int32_t>(best_index);
          } else {
            double sum = 0.0;
            for (std::int64_t h = win.h0; h < win.h1; ++h)
              for (std::int64_t w = win.w0; w < win.w1; ++w) sum += src[h * spec_.in_w + w];
            out[o] = static_cast<float>(sum / static_cast<double>(win.divisor));
          }
        }
      }
    }
    return argmax;
  }

  void backward(const Tensor& dy, const Tensor& workspace, Tensor& dx) override {
    const std::int64_t planes = spec_.batch * spec_.channels, in_plane = spec_.in_h * spec_.in_w;
    const std::int64_t out_h = spec_.out_h(), out_w = spec_.out_w();
    if (spec_.kind == PoolKind::max) {
      BT_CHECK(workspace.dtype() == DType::i32 && workspace.shape() == spec_.output_shape(),
               "pool2d backward (reference): workspace {} is not this backend's argmax tensor {}",
               workspace.describe(), shape_str(spec_.output_shape()));
    }
    const float* grad_out = dy.f32();
    float* grad_in = dx.f32();
    dx.zero();
    for (std::int64_t plane = 0; plane < planes; ++plane) {
      float* dst = grad_in + plane * in_plane;
      for (std::int64_t oh = 0; oh < out_h; ++oh) {
        for (std::int64_t ow = 0; ow < out_w; ++ow) {
          const std::int64_t o = (plane * out_h + oh) * out_w + ow;
          if (spec_.kind == PoolKind::max) {
            const std::int32_t index = workspace.data<std::int32_t>()[o];
            BT_CHECK(index >= 0 && index < in_plane, "pool2d backward (reference): argmax {} outside the {}x{} plane",
                     index, spec_.in_h, spec_.in_w);
            dst[index] += grad_out[o];
          } else {
            const Window win = window_at(spec_, oh, ow);
            const float share = grad_out[o] / static_cast<float>(win.divisor);
            for (std::int64_t h = win.h0; h < win.h1; ++h)
              for (std::int64_t w = win.w0; w < win.w1; ++w) dst[h * spec_.in_w + w] += share;
          }
        }
      }
    }
  }

 private:
  Pool2dSpec spec_;
};

}  // namespace

std::unique_ptr<Pool2d> make_pool2d(const Pool2dSpec& spec) { return std::make_unique<ReferencePool2d>(spec); }

void global_avg_pool_forward(const Tensor& x, Tensor& y) {
  const std::int64_t planes = x.dim(0) * x.dim(1), plane_size = x.dim(2) * x.dim(3);
  for (std::int64_t plane = 0; plane < planes; ++plane) {
    const float* src = x.f32() + plane * plane_size;
    double sum = 0.0;
    for (std::int64_t i = 0; i < plane_size; ++i) sum += src[i];
    y.f32()[plane] = static_cast<float>(sum / static_cast<double>(plane_size));
  }
}

void global_avg_pool_backward(const Tensor& dy, Tensor& dx) {
  const std::int64_t planes = dx.dim(0) * dx.dim(1), plane_size = dx.dim(2) * dx.dim(3);
  for (std::int64_t plane = 0; plane < planes; ++plane) {
    const float share = dy.f32()[plane] / static_cast<float>(plane_size);
    float* dst = dx.f32() + plane * plane_size;
    for (std::int64_t i = 0; i < plane_size; ++i) dst[i] = share;
  }
}

}  // namespace bigtrain::kernels::reference
