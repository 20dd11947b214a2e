#include "kernels/cpu/pooling.hpp"

#include <unordered_map>

#include "kernels/core/error.hpp"
#include "kernels/cpu/dnnl_context.hpp"

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
// 196 -> 93 ms for average, medians of 7 in one run). Primitives, reorders and memory objects are built once here; each call
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
  explicit DnnlPool2d(const Pool2dSpec& spec) : spec_(spec) {
    const memory::desc plain_src_md(to_dims(spec.input_shape()), memory::data_type::f32, tag::nchw);
    const memory::desc plain_dst_md(to_dims(spec.output_shape()), memory::data_type::f32, tag::nchw);
    const memory::desc src_md(to_dims(spec.input_shape()), memory::data_type::f32, tag::nhwc);
    const memory::desc dst_md(to_dims(spec.output_shape()), memory::data_type::f32, tag::nhwc);
    const memory::dims strides{spec.stride_h, spec.stride_w}, kernel{spec.kernel_h, spec.kernel_w};
    const memory::dims padding{spec.pad_h, spec.pad_w};
    const dnnl::algorithm algorithm = algorithm_for(spec);
    const dnnl::pooling_forward::primitive_desc training_pd(
        {dnnl::prop_kind::forward_training, algorithm, src_md, dst_md, strides, kernel, padding, padding}, engine());
    const dnnl::pooling_forward::primitive_desc inference_pd(
        {dnnl::prop_kind::forward_inference, algorithm, src_md, dst_md, strides, kernel, padding, padding}, engine());
    const dnnl::pooling_backward::primitive_desc backward_pd(
        {algorithm, src_md, dst_md, strides, kernel, padding, padding}, engine(), training_pd);
    training_ = dnnl::pooling_forward(training_pd);
    inference_ = dnnl::pooling_forward(inference_pd);
    backward_ = dnnl::pooling_backward(backward_pd);
    plain_src_ = memory(plain_src_md, engine(), DNNL_MEMORY_NONE);
    plain_dst_ = memory(plain_dst_md, engine(), DNNL_MEMORY_NONE);
    src_ = memory(src_md, engine(), DNNL_MEMORY_NONE);
    dst_ = memory(dst_md, engine(), DNNL_MEMORY_NONE);
    src_to_nhwc_ = dnnl::reorder(plain_src_, src_);
    src_to_nchw_ = dnnl::reorder(src_, plain_src_);
    dst_to_nhwc_ = dnnl::reorder(plain_dst_, dst_);
    dst_to_nchw_ = dnnl::reorder(dst_, plain_dst_);
    workspace_bytes_ = training_pd.workspace_desc().get_size();
    forward_args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}};
    backward_args_ = {{DNNL_ARG_DIFF_DST, dst_}, {DNNL_ARG_DIFF_SRC, src_}};
    if (workspace_bytes_ > 0) {
      workspace_ = memory(training_pd.workspace_desc(), engine(), DNNL_MEMORY_NONE);
      training_args_ = forward_args_;
      training_args_.emplace(DNNL_ARG_WORKSPACE, workspace_);
      backward_args_.emplace(DNNL_ARG_WORKSPACE, workspace_);
    }
  }

  Tensor forward(const Tensor& x, Tensor& y, bool training) override {
    const Tensor x_nhwc = Tensor::empty(x.shape()), y_nhwc = Tensor::empty(y.shape());
    bind(x, y, x_nhwc, y_nhwc);
    src_to_nhwc_.execute(stream(), plain_src_, src_);
    Tensor workspace;
    if (training && workspace_bytes_ > 0) {
      // Returned to the caller and kept until backward, so it cannot be a member.
      workspace = Tensor::empty({static_cast<std::int64_t>(workspace_bytes_)}, DType::u8);
      workspace_.set_data_handle(workspace.raw_data());
      training_.execute(stream(), training_args_);
    } else {
      (training ? training_ : inference_).execute(stream(), forward_args_);
    }
    dst_to_nchw_.execute(stream(), dst_, plain_dst_);
    stream().wait();
    return workspace;
  }

  void backward(const Tensor& dy, const Tensor& workspace, Tensor& dx) override {
    if (workspace_bytes_ > 0) {
      BT_CHECK(workspace.dtype() == DType::u8 && workspace.nbytes() == workspace_bytes_,
               "pool2d backward (cpu): workspace {} is not the {}-byte oneDNN workspace this op's forward returns",
               workspace.describe(), workspace_bytes_);
      workspace_.set_data_handle(workspace.raw_data());
    }
    const Tensor dx_nhwc = Tensor::empty(dx.shape()), dy_nhwc = Tensor::empty(dy.shape());
    bind(dx, dy, dx_nhwc, dy_nhwc);
    dst_to_nhwc_.execute(stream(), plain_dst_, dst_);
    backward_.execute(stream(), backward_args_);
    src_to_nchw_.execute(stream(), src_, plain_src_);
    stream().wait();
  }

 private:
  void bind(const Tensor& input_side, const Tensor& output_side, const Tensor& input_nhwc, const Tensor& output_nhwc) {
    plain_src_.set_data_handle(input_side.raw_data());
    plain_dst_.set_data_handle(output_side.raw_data());
    src_.set_data_handle(input_nhwc.raw_data());
    dst_.set_data_handle(output_nhwc.raw_data());
  }

  Pool2dSpec spec_;
  dnnl::pooling_forward training_, inference_;
  dnnl::pooling_backward backward_;
  dnnl::reorder src_to_nhwc_, src_to_nchw_, dst_to_nhwc_, dst_to_nchw_;
  memory plain_src_, plain_dst_, src_, dst_, workspace_;
  std::unordered_map<int, memory> forward_args_, training_args_, backward_args_;
  std::size_t workspace_bytes_ = 0;
};

// Below this many elements a parallel region costs more than it saves.
constexpr std::int64_t kParallelThreshold = 1 << 15;

}  // namespace

std::unique_ptr<Pool2d> make_pool2d(const Pool2dSpec& spec) { return std::make_unique<DnnlPool2d>(spec); }

void global_avg_pool_forward(const Tensor& x, Tensor& y) {
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
