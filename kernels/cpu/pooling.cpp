#include "kernels/cpu/pooling.hpp"

#include <algorithm>
#include <array>
#include <memory>
#include <unordered_map>

#include "kernels/core/error.hpp"
#include "kernels/cpu/dnnl_context.hpp"
#include "kernels/cpu/layout_bridge.hpp"

namespace bigtrain::kernels::cpu {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

dnnl::algorithm algorithm_for(const Pool2dSpec& spec) {
  if (spec.kind == PoolKind::max) return dnnl::algorithm::pooling_max;
  return spec.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                : dnnl::algorithm::pooling_avg_exclude_padding;
}

// oneDNN pooling. Tensors are plain NCHW, but oneDNN 2.6 has no JIT pooling for
// NCHW on AVX2 (it picks simple_nchw); reordering to NHWC around its JIT primitive
// was about twice as fast, reorders included, for the ResNet stem's pool on this
// AVX2 machine (8x64x112x112, 3x3 stride 2: forward+backward 344 -> 230 ms for max,
// 196 -> 93 ms for average, medians of 7 in one run). Primitives, reorders and memory objects are built once per activation layout
// (blocked activations, Tensor::layout, need no reorder at all); each call
// points the memory objects at the caller's buffers and at two NHWC scratch
// tensors from the caching allocator (transient, so they cost no standing memory).
//
// Right padding equals left padding: oneDNN then computes the output size with the
// same floor division as PyTorch, and windows reaching into the right padding see
// what PyTorch's see (ignored by max, counted as zeros by count_include_pad average).
// oneDNN's max keeps the first maximum in window order on ties, as PyTorch does; its
// workspace (where each maximum came from) is in oneDNN's own format and size.
class DnnlPool2d final : public Pool2d {
 public:
  // The plain variant is built at once, so a spec oneDNN cannot pool fails here.
  explicit DnnlPool2d(const Pool2dSpec& spec) : spec_(spec) { variant_for(Layout::plain); }

  Tensor forward(const Tensor& x, Tensor& y, bool training) override {
    const Layout layout = writable_layout(y, x.layout());
    const Tensor input = x.to_layout(layout);
    Variant& variant = variant_for(layout);
    if (training) trained_layout_ = layout;
    const Tensor x_inner = variant.reordered ? Tensor::empty(x.shape()) : input;
    y.set_layout(layout);
    const Tensor y_inner = variant.reordered ? Tensor::empty(y.shape()) : y;
    variant.bind(input, y, x_inner, y_inner);
    if (variant.reordered) variant.src_in.execute(stream(), variant.outer_src, variant.src);
    Tensor workspace;
    if (training && variant.workspace_bytes > 0) {
      // Returned to the caller and kept until backward, so it cannot be a member.
      workspace = Tensor::empty({static_cast<std::int64_t>(variant.workspace_bytes)}, DType::u8);
      variant.workspace.set_data_handle(workspace.raw_data());
      variant.training.execute(stream(), variant.training_args);
    } else {
      (training ? variant.training : variant.inference).execute(stream(), variant.forward_args);
    }
    if (variant.reordered) variant.dst_out.execute(stream(), variant.dst, variant.outer_dst);
    stream().wait();
    return workspace;
  }

  void backward(const Tensor& dy, const Tensor& workspace, Tensor& dx) override {
    // The workspace is in the format of the forward that made it: backward runs in
    // that forward's layout.
    Variant& variant = variant_for(trained_layout_);
    if (variant.workspace_bytes > 0) {
      BT_CHECK(workspace.dtype() == DType::u8 && workspace.nbytes() == variant.workspace_bytes,
               "pool2d backward (cpu): workspace {} is not the {}-byte oneDNN workspace this op's forward returns",
               workspace.describe(), variant.workspace_bytes);
      variant.workspace.set_data_handle(workspace.raw_data());
    }
    const Tensor gradient = dy.to_layout(trained_layout_);
    dx.set_layout(writable_layout(dx, trained_layout_));
    BT_CHECK(dx.layout() == trained_layout_, "pool2d backward (cpu): dx {} cannot hold the {} layout", dx.describe(),
             layout_name(trained_layout_));
    const Tensor dx_inner = variant.reordered ? Tensor::empty(dx.shape()) : dx;
    const Tensor dy_inner = variant.reordered ? Tensor::empty(dy.shape()) : gradient;
    variant.bind(dx, gradient, dx_inner, dy_inner);
    if (variant.reordered) variant.dst_in.execute(stream(), variant.outer_dst, variant.dst);
    variant.backward.execute(stream(), variant.backward_args);
    if (variant.reordered) variant.src_out.execute(stream(), variant.src, variant.outer_src);
    stream().wait();
  }

 private:
  // The primitives for activations in one layout. Plain tensors run in NHWC
  // through reorders (see above); blocked and nhwc ones run in their own layout directly.
  struct Variant {
    bool reordered = false;
    dnnl::pooling_forward training, inference;
    dnnl::pooling_backward backward;
    dnnl::reorder src_in, src_out, dst_in, dst_out;
    memory outer_src, outer_dst, src, dst, workspace;
    std::unordered_map<int, memory> forward_args, training_args, backward_args;
    std::size_t workspace_bytes = 0;

    void bind(const Tensor& input_side, const Tensor& output_side, const Tensor& input_inner,
              const Tensor& output_inner) {
      outer_src.set_data_handle(input_side.raw_data());
      outer_dst.set_data_handle(output_side.raw_data());
      src.set_data_handle(input_inner.raw_data());
      dst.set_data_handle(output_inner.raw_data());
    }
  };

  Variant& variant_for(Layout layout) {
    auto& slot = variants_[static_cast<int>(layout)];
    if (!slot) slot = std::make_unique<Variant>(build(layout));
    return *slot;
  }

  Variant build(Layout layout) const {
    const memory::dims src_dims = to_dims(spec_.input_shape()), dst_dims = to_dims(spec_.output_shape());
    Variant v;
    v.reordered = layout == Layout::plain;
    const auto tag_of = [&](const memory::dims& dims) {
      return layout == Layout::plain ? memory::desc(dims, memory::data_type::f32, tag::nhwc) : layout_desc(dims, layout);
    };
    const memory::desc src_md = tag_of(src_dims), dst_md = tag_of(dst_dims);
    const memory::dims strides{spec_.stride_h, spec_.stride_w}, kernel{spec_.kernel_h, spec_.kernel_w};
    const memory::dims padding{spec_.pad_h, spec_.pad_w};
    const dnnl::algorithm algorithm = algorithm_for(spec_);
    const dnnl::pooling_forward::primitive_desc training_pd(
        {dnnl::prop_kind::forward_training, algorithm, src_md, dst_md, strides, kernel, padding, padding}, engine());
    const dnnl::pooling_forward::primitive_desc inference_pd(
        {dnnl::prop_kind::forward_inference, algorithm, src_md, dst_md, strides, kernel, padding, padding}, engine());
    const dnnl::pooling_backward::primitive_desc backward_pd(
        {algorithm, src_md, dst_md, strides, kernel, padding, padding}, engine(), training_pd);
    v.training = dnnl::pooling_forward(training_pd);
    v.inference = dnnl::pooling_forward(inference_pd);
    v.backward = dnnl::pooling_backward(backward_pd);
    v.outer_src = memory(layout_desc(src_dims, layout), engine(), DNNL_MEMORY_NONE);
    v.outer_dst = memory(layout_desc(dst_dims, layout), engine(), DNNL_MEMORY_NONE);
    v.src = memory(src_md, engine(), DNNL_MEMORY_NONE);
    v.dst = memory(dst_md, engine(), DNNL_MEMORY_NONE);
    if (v.reordered) {
      v.src_in = dnnl::reorder(v.outer_src, v.src);
      v.src_out = dnnl::reorder(v.src, v.outer_src);
      v.dst_in = dnnl::reorder(v.outer_dst, v.dst);
      v.dst_out = dnnl::reorder(v.dst, v.outer_dst);
    }
    v.workspace_bytes = training_pd.workspace_desc().get_size();
    v.forward_args = {{DNNL_ARG_SRC, v.src}, {DNNL_ARG_DST, v.dst}};
    v.backward_args = {{DNNL_ARG_DIFF_DST, v.dst}, {DNNL_ARG_DIFF_SRC, v.src}};
    if (v.workspace_bytes > 0) {
      v.workspace = memory(training_pd.workspace_desc(), engine(), DNNL_MEMORY_NONE);
      v.training_args = v.forward_args;
      v.training_args.emplace(DNNL_ARG_WORKSPACE, v.workspace);
      v.backward_args.emplace(DNNL_ARG_WORKSPACE, v.workspace);
    }
    return v;
  }

  Pool2dSpec spec_;
  std::array<std::unique_ptr<Variant>, kLayoutCount> variants_;
  Layout trained_layout_ = Layout::plain;
};

// Below this many elements a parallel region costs more than it saves.
constexpr std::int64_t kParallelThreshold = 1 << 15;

}  // namespace

std::unique_ptr<Pool2d> make_pool2d(const Pool2dSpec& spec) { return std::make_unique<DnnlPool2d>(spec); }

// Blocked tensors (Tensor::layout): channel c = g*K + k of sample n is the
// K-strided sequence starting at ((n*G + g)*HW)*K + k; the K channels of a group
// are summed together, as the vector lanes.
namespace {

void blocked_global_avg_pool_forward(const Tensor& x, Tensor& y) {
  const std::int64_t block = layout_block(x.layout()), groups = x.dim(0) * x.dim(1) / block;
  const std::int64_t plane_size = x.dim(2) * x.dim(3);
  const float* in = x.data<float>();
  float* out = y.data<float>();
  const float inverse_size = 1.0f / static_cast<float>(plane_size);
#pragma omp parallel for schedule(static) if (groups * block * plane_size >= kParallelThreshold)
  for (std::int64_t group = 0; group < groups; ++group) {
    const float* src = in + group * plane_size * block;
    float sums[16] = {};
    for (std::int64_t i = 0; i < plane_size; ++i)
#pragma omp simd
      for (std::int64_t k = 0; k < block; ++k) sums[k] += src[i * block + k];
    for (std::int64_t k = 0; k < block; ++k) out[group * block + k] = sums[k] * inverse_size;
  }
}

void blocked_global_avg_pool_backward(const Tensor& dy, Tensor& dx) {
  const std::int64_t block = layout_block(dx.layout()), groups = dx.dim(0) * dx.dim(1) / block;
  const std::int64_t plane_size = dx.dim(2) * dx.dim(3);
  const float* grad_out = dy.data<float>();
  float* grad_in = dx.data<float>();
  const float inverse_size = 1.0f / static_cast<float>(plane_size);
#pragma omp parallel for schedule(static) if (groups * block * plane_size >= kParallelThreshold)
  for (std::int64_t group = 0; group < groups; ++group) {
    float share[16];
    for (std::int64_t k = 0; k < block; ++k) share[k] = grad_out[group * block + k] * inverse_size;
    float* dst = grad_in + group * plane_size * block;
    for (std::int64_t i = 0; i < plane_size; ++i)
#pragma omp simd
      for (std::int64_t k = 0; k < block; ++k) dst[i * block + k] = share[k];
  }
}

// nhwc: a sample's pixels in turn, all its channels as the vector lanes; each
// channel is summed in pixel order, as in the blocked loops.
void nhwc_global_avg_pool_forward(const Tensor& x, Tensor& y) {
  const std::int64_t batch = x.dim(0), channels = x.dim(1), plane_size = x.dim(2) * x.dim(3);
  const float* in = x.data<float>();
  float* out = y.data<float>();
  const float inverse_size = 1.0f / static_cast<float>(plane_size);
#pragma omp parallel for schedule(static) if (batch * channels * plane_size >= kParallelThreshold)
  for (std::int64_t n = 0; n < batch; ++n) {
    const float* src = in + n * plane_size * channels;
    float* sums = out + n * channels;
    std::fill_n(sums, channels, 0.0f);
    for (std::int64_t i = 0; i < plane_size; ++i)
#pragma omp simd
      for (std::int64_t c = 0; c < channels; ++c) sums[c] += src[i * channels + c];
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c) sums[c] *= inverse_size;
  }
}

void nhwc_global_avg_pool_backward(const Tensor& dy, Tensor& dx) {
  const std::int64_t batch = dx.dim(0), channels = dx.dim(1), plane_size = dx.dim(2) * dx.dim(3);
  const float* grad_out = dy.data<float>();
  float* grad_in = dx.data<float>();
  const float inverse_size = 1.0f / static_cast<float>(plane_size);
#pragma omp parallel for schedule(static) if (batch * channels * plane_size >= kParallelThreshold)
  for (std::int64_t n = 0; n < batch; ++n) {
    const float* share = grad_out + n * channels;
    float* dst = grad_in + n * plane_size * channels;
    for (std::int64_t i = 0; i < plane_size; ++i)
#pragma omp simd
      for (std::int64_t c = 0; c < channels; ++c) dst[i * channels + c] = share[c] * inverse_size;
  }
}

}  // namespace

void global_avg_pool_forward(const Tensor& x, Tensor& y) {
  if (x.layout() == Layout::nhwc) return nhwc_global_avg_pool_forward(x, y);
  if (x.layout() != Layout::plain) return blocked_global_avg_pool_forward(x, y);
  const std::int64_t planes = x.dim(0) * x.dim(1), plane_size = x.dim(2) * x.dim(3);
  const float* in = x.data<float>();
  float* out = y.data<float>();
  const float inverse_size = 1.0f / static_cast<float>(plane_size);
#pragma omp parallel for schedule(static) if (planes * plane_size >= kParallelThreshold)
  for (std::int64_t plane = 0; plane < planes; ++plane) {
    const float* src = in + plane * plane_size;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t i = 0; i < plane_size; ++i) sum += src[i];
    out[plane] = sum * inverse_size;
  }
}

void global_avg_pool_backward(const Tensor& dy, Tensor& dx) {
  if (dx.layout() == Layout::nhwc) return nhwc_global_avg_pool_backward(dy, dx);
  if (dx.layout() != Layout::plain) return blocked_global_avg_pool_backward(dy, dx);
  const std::int64_t planes = dx.dim(0) * dx.dim(1), plane_size = dx.dim(2) * dx.dim(3);
  const float* grad_out = dy.data<float>();
  float* grad_in = dx.data<float>();
  const float inverse_size = 1.0f / static_cast<float>(plane_size);
#pragma omp parallel for schedule(static) if (planes * plane_size >= kParallelThreshold)
  for (std::int64_t plane = 0; plane < planes; ++plane) {
    const float share = grad_out[plane] * inverse_size;
    float* dst = grad_in + plane * plane_size;
#pragma omp simd
    for (std::int64_t i = 0; i < plane_size; ++i) dst[i] = share;
  }
}

}  // namespace bigtrain::kernels::cpu
