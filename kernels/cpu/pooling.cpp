#include "kernels/cpu/pooling.hpp"

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

// oneDNN pooling in plain NCHW. Primitives and memory objects are built once here;
// each call only points the memory objects at the caller's buffers.
//
// Right padding equals left padding: oneDNN then computes the output size with the
// same floor division as PyTorch, and windows reaching into the right padding see
// what PyTorch's see (ignored by max, counted as zeros by count_include_pad average).
// oneDNN's max keeps the first maximum in window order on ties, as PyTorch does; its
// workspace (where each maximum came from) is in oneDNN's own format and size.
class DnnlPool2d final : public Pool2d {
 public:
  explicit DnnlPool2d(const Pool2dSpec& spec) : spec_(spec) {
    const memory::desc src_md(to_dims(spec.input_shape()), memory::data_type::f32, tag::nchw);
    const memory::desc dst_md(to_dims(spec.output_shape()), memory::data_type::f32, tag::nchw);
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
    src_ = memory(src_md, engine(), DNNL_MEMORY_NONE);
    dst_ = memory(dst_md, engine(), DNNL_MEMORY_NONE);
    workspace_bytes_ = training_pd.workspace_desc().get_size();
    if (workspace_bytes_ > 0) workspace_ = memory(training_pd.workspace_desc(), engine(), DNNL_MEMORY_NONE);
  }

  Tensor forward(const Tensor& x, Tensor& y, bool training) override {
    src_.set_data_handle(x.raw_data());
    dst_.set_data_handle(y.raw_data());
    if (!training || workspace_bytes_ == 0) {
      (training ? training_ : inference_).execute(stream(), {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}});
      stream().wait();
      return {};
    }
    // Returned to the caller and kept until backward, so it cannot be a member; the
    // caching allocator serves it from the cache after the first step.
    Tensor workspace = Tensor::empty({static_cast<std::int64_t>(workspace_bytes_)}, DType::u8);
    workspace_.set_data_handle(workspace.raw_data());
    training_.execute(stream(), {{DNNL_ARG_SRC, src_}, {DNNL_ARG_DST, dst_}, {DNNL_ARG_WORKSPACE, workspace_}});
    stream().wait();
    return workspace;
  }

  void backward(const Tensor& dy, const Tensor& workspace, Tensor& dx) override {
    dst_.set_data_handle(dy.raw_data());
    src_.set_data_handle(dx.raw_data());
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, dst_}, {DNNL_ARG_DIFF_SRC, src_}};
    if (workspace_bytes_ > 0) {
      BT_CHECK(workspace.dtype() == DType::u8 && workspace.nbytes() == workspace_bytes_,
               "pool2d backward (cpu): workspace {} is not the {}-byte oneDNN workspace this op's forward returns",
               workspace.describe(), workspace_bytes_);
      workspace_.set_data_handle(workspace.raw_data());
      args.emplace(DNNL_ARG_WORKSPACE, workspace_);
    }
    backward_.execute(stream(), args);
    stream().wait();
  }

 private:
  Pool2dSpec spec_;
  dnnl::pooling_forward training_, inference_;
  dnnl::pooling_backward backward_;
  memory src_, dst_, workspace_;
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
