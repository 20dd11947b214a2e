#include "kernels/cuda/conv2d.hpp"

#include <vector>

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "kernels/cuda/cast.hpp"
#include "kernels/cuda/check.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/conv_epilogue_kernels.hpp"
#include "kernels/cuda/cudnn_descriptors.hpp"

namespace bigtrain::kernels::cuda {
namespace {

using ::bigtrain::cuda::checked_int;
using ::bigtrain::cuda::Context;
using ::bigtrain::cuda::ConvolutionDescriptor;
using ::bigtrain::cuda::FilterDescriptor;
using ::bigtrain::cuda::nchw_f32;
using ::bigtrain::cuda::TensorDescriptor;

std::string describe(const Conv2dSpec& s) {
  return fmt::format("conv2d {}->{} kernel {}x{} stride {}x{} pad {}x{} dilation {}x{} groups {} on {}",
                     s.in_channels, s.out_channels, s.kernel_h, s.kernel_w, s.stride_h, s.stride_w, s.pad_h, s.pad_w,
                     s.dilation_h, s.dilation_w, s.groups, shape_str(s.input_shape()));
}

// Winograd and FFT algorithms compute through transforms of the inputs; the others
// are dot products in some summation order.
bool is_transform(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool is_transform(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool is_transform(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

template <typename Algo>
struct Choice {
  Algo algo{};
  std::size_t workspace = 0;
};

// Picks from cuDNN's heuristic ranking (fastest first) the first algorithm that
// runs in plain float32 (no tensor-op math: TF32 would round the inputs to 10-bit
// mantissas; mixed precision allows it, its operands being 16-bit already), is a plain summation unless transforms are allowed (see
// Context::allow_transform_algorithms), fits the workspace limit, and, when one
// such exists and Context::prefer_deterministic_algorithms (the default), is
// deterministic, so a training run on the GPU repeats bit for bit.
// `workspace_of` asks cuDNN for the algorithm's exact size and refuses algorithms
// the descriptor combination does not support.
template <typename Perf, typename Algo, typename WorkspaceOf>
Choice<Algo> choose(const std::vector<Perf>& ranked, std::size_t limit, bool allow_transforms,
                    bool allow_tensor_ops, bool prefer_deterministic, WorkspaceOf&& workspace_of,
                    const Conv2dSpec& spec, const char* pass) {
  for (const bool need_deterministic : {prefer_deterministic, false}) {
    for (const Perf& perf : ranked) {
      if (perf.status != CUDNN_STATUS_SUCCESS) continue;
      if (!allow_transforms && is_transform(perf.algo)) continue;
      if (!allow_tensor_ops &&
          (perf.mathType == CUDNN_TENSOR_OP_MATH || perf.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
        continue;
      if (need_deterministic && perf.determinism != CUDNN_DETERMINISTIC) continue;
      std::size_t bytes = 0;
      if (!workspace_of(perf.algo, bytes) || bytes > limit) continue;
      return {perf.algo, bytes};
    }
  }
  throw Error(fmt::format("{}: cuDNN offers no {} {} algorithm{} within the workspace limit of {} MiB", describe(spec),
                          dtype_name(spec.compute_dtype), pass, allow_transforms ? "" : " without transforms",
                          limit >> 20));
}

const float kOne = 1.0f, kZero = 0.0f;

bool mixed(const Conv2dSpec& s) { return s.compute_dtype != DType::f32; }

// The cuDNN type of x, w and y: float32, or the 16-bit compute type of mixed
// precision (cuDNN's PSEUDO_HALF / PSEUDO_BFLOAT16 configurations: 16-bit tensors,
// float32 arithmetic set by the convolution descriptor).
cudnnDataType_t operand_type(const Conv2dSpec& s) {
  switch (s.compute_dtype) {
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    case DType::f16: return CUDNN_DATA_HALF;
    default: return CUDNN_DATA_FLOAT;
  }
}

TensorDescriptor nchw(cudnnDataType_t type, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  TensorDescriptor desc;
  BT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc.get(), CUDNN_TENSOR_NCHW, type, checked_int(n, "conv2d", "batch"),
                                            checked_int(c, "conv2d", "channels"), checked_int(h, "conv2d", "height"),
                                            checked_int(w, "conv2d", "width")));
  return desc;
}

class CudnnConv2d final : public Conv2d {
 public:
  explicit CudnnConv2d(const Conv2dSpec& spec)
      : spec_(spec),
        context_(Context::of_backend("conv2d")),
        x_desc_(nchw(operand_type(spec), spec.batch, spec.in_channels, spec.in_h, spec.in_w)),
        y_desc_(nchw(operand_type(spec), spec.batch, spec.out_channels, spec.out_h(), spec.out_w())),
        y_f32_desc_(nchw_f32(spec.batch, spec.out_channels, spec.out_h(), spec.out_w(), "conv2d")),
        bias_desc_(nchw_f32(1, spec.out_channels, 1, 1, "conv2d")) {
    BT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_desc_.get(), operand_type(spec), CUDNN_TENSOR_NCHW,
                                              checked_int(spec.out_channels, "conv2d", "out_channels"),
                                              checked_int(spec.in_channels / spec.groups, "conv2d", "in_channels"),
                                              spec.kernel_h, spec.kernel_w));
    BT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_desc_.get(), spec.pad_h, spec.pad_w, spec.stride_h,
                                                   spec.stride_w, spec.dilation_h, spec.dilation_w,
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    BT_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv_desc_.get(), spec.groups));
    // Plain FMA math in float32: cuDNN's default would let float32 convolutions run
    // as TF32. Mixed precision takes the tensor cores, which is its point; the
    // arithmetic type stays float32 (CUDNN_DATA_FLOAT above) in every case.
    BT_CUDNN_CHECK(cudnnSetConvolutionMathType(conv_desc_.get(), mixed(spec) ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
    check_output_shape();
    choose_algorithms();
  }

  // Mixed precision: the float32 operands are rounded into 16-bit buffers of the
  // caching allocator (freed at the end of the call; the compute stream orders
  // their reuse), cuDNN writes a 16-bit result, widened into the float32 output.
  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    context_.activate();
    const Tensor x_in = operand(x), w_in = operand(weight);
    Tensor y_out = mixed(spec_) ? Tensor::empty(y.shape(), spec_.compute_dtype, y.device()) : y;
    void* workspace = context_.workspace(forward_.workspace);
    BT_CUDNN_CHECK(cudnnConvolutionForward(context_.cudnn(), &kOne, x_desc_.get(), x_in.raw_data(), w_desc_.get(),
                                           w_in.raw_data(), conv_desc_.get(), forward_.algo, workspace,
                                           forward_.workspace, &kZero, y_desc_.get(), y_out.raw_data()));
    if (mixed(spec_)) from_16bit(y_out, y, context_);
    if (bias != nullptr) {
      // y += bias broadcast over N, H, W, in float32 (the reference adds it unrounded).
      BT_CUDNN_CHECK(cudnnAddTensor(context_.cudnn(), &kOne, bias_desc_.get(), bias->raw_data(), &kOne,
                                    y_f32_desc_.get(), y.raw_data()));
    }
  }

  // cuDNN's fused convolution-bias-activation has no BatchNorm and no residual
  // between bias and activation; one element-wise kernel after it does all three.
  void forward_fused(const Tensor& x, const Tensor& weight, const Tensor* bias, const ConvEpilogueInputs& epilogue,
                     Tensor& y) override {
    forward(x, weight, bias, y);
    const ConvEpilogue& steps = spec_.epilogue;
    const auto data = [](const Tensor* t) { return t ? t->data<float>() : nullptr; };
    BT_CUDA_CHECK(::bigtrain::cuda::launch::conv_epilogue(
        y.data<float>(), data(epilogue.gamma), data(epilogue.beta), data(epilogue.running_mean),
        data(epilogue.running_var), steps.bn_epsilon, data(epilogue.residual), steps.relu, spec_.out_channels,
        spec_.out_h() * spec_.out_w(), y.numel(), context_.compute_stream()));
  }

  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    context_.activate();
    const Tensor w_in = operand(weight), dy_in = operand(dy);
    Tensor dx_out = mixed(spec_) ? Tensor::empty(dx.shape(), spec_.compute_dtype, dx.device()) : dx;
    void* workspace = context_.workspace(backward_data_.workspace);
    BT_CUDNN_CHECK(cudnnConvolutionBackwardData(context_.cudnn(), &kOne, w_desc_.get(), w_in.raw_data(),
                                                y_desc_.get(), dy_in.raw_data(), conv_desc_.get(), backward_data_.algo,
                                                workspace, backward_data_.workspace, &kZero, x_desc_.get(),
                                                dx_out.raw_data()));
    if (mixed(spec_)) from_16bit(dx_out, dx, context_);
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    context_.activate();
    const Tensor x_in = operand(x), dy_in = operand(dy);
    Tensor dw_out = mixed(spec_) ? Tensor::empty(dweight.shape(), spec_.compute_dtype, dweight.device()) : dweight;
    void* workspace = context_.workspace(backward_filter_.workspace);
    BT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(context_.cudnn(), &kOne, x_desc_.get(), x_in.raw_data(),
                                                  y_desc_.get(), dy_in.raw_data(), conv_desc_.get(),
                                                  backward_filter_.algo, workspace, backward_filter_.workspace,
                                                  &kZero, w_desc_.get(), dw_out.raw_data()));
    if (mixed(spec_)) from_16bit(dw_out, dweight, context_);
    if (dbias != nullptr) {
      // From the float32 gradient, as the reference sums it.
      BT_CUDNN_CHECK(cudnnConvolutionBackwardBias(context_.cudnn(), &kOne, y_f32_desc_.get(), dy.raw_data(), &kZero,
                                                  bias_desc_.get(), dbias->raw_data()));
    }
  }

 private:
  // cuDNN's own output size must be the spec's (PyTorch's) formula; a mismatch
  // would mean the descriptors say something else than the spec.
  void check_output_shape() const {
    int n = 0, c = 0, h = 0, w = 0;
    BT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv_desc_.get(), x_desc_.get(), w_desc_.get(), &n, &c, &h,
                                                         &w));
    BT_CHECK(n == spec_.batch && c == spec_.out_channels && h == spec_.out_h() && w == spec_.out_w(),
             "{}: cuDNN computes output [{},{},{},{}], the spec {}", describe(spec_), n, c, h, w,
             shape_str(spec_.output_shape()));
  }

  void choose_algorithms() {
    cudnnHandle_t handle = context_.cudnn();
    const std::size_t limit = context_.workspace_limit();
    const bool transforms = context_.allow_transform_algorithms();
    const bool tensor_ops = mixed(spec_);
    const bool deterministic = context_.prefer_deterministic_algorithms();
    {
      int max_count = 0, count = 0;
      BT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max_count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> ranked(static_cast<std::size_t>(max_count));
      BT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, x_desc_.get(), w_desc_.get(), conv_desc_.get(),
                                                            y_desc_.get(), max_count, &count, ranked.data()));
      ranked.resize(static_cast<std::size_t>(count));
      forward_ = choose<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
          ranked, limit, transforms, tensor_ops, deterministic,
          [&](cudnnConvolutionFwdAlgo_t algo, std::size_t& bytes) {
            return cudnnGetConvolutionForwardWorkspaceSize(handle, x_desc_.get(), w_desc_.get(), conv_desc_.get(),
                                                           y_desc_.get(), algo, &bytes) == CUDNN_STATUS_SUCCESS;
          },
          spec_, "forward");
    }
    {
      int max_count = 0, count = 0;
      BT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &max_count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> ranked(static_cast<std::size_t>(max_count));
      BT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, w_desc_.get(), y_desc_.get(),
                                                                 conv_desc_.get(), x_desc_.get(), max_count, &count,
                                                                 ranked.data()));
      ranked.resize(static_cast<std::size_t>(count));
      backward_data_ = choose<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
          ranked, limit, transforms, tensor_ops, deterministic,
          [&](cudnnConvolutionBwdDataAlgo_t algo, std::size_t& bytes) {
            return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, w_desc_.get(), y_desc_.get(),
                                                                conv_desc_.get(), x_desc_.get(), algo,
                                                                &bytes) == CUDNN_STATUS_SUCCESS;
          },
          spec_, "backward-data");
    }
    {
      int max_count = 0, count = 0;
      BT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &max_count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> ranked(static_cast<std::size_t>(max_count));
      BT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, x_desc_.get(), y_desc_.get(),
                                                                   conv_desc_.get(), w_desc_.get(), max_count,
                                                                   &count, ranked.data()));
      ranked.resize(static_cast<std::size_t>(count));
      backward_filter_ = choose<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
          ranked, limit, transforms, tensor_ops, deterministic,
          [&](cudnnConvolutionBwdFilterAlgo_t algo, std::size_t& bytes) {
            return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, x_desc_.get(), y_desc_.get(),
                                                                  conv_desc_.get(), w_desc_.get(), algo,
                                                                  &bytes) == CUDNN_STATUS_SUCCESS;
          },
          spec_, "backward-filter");
    }
  }

  // The tensor as the convolution reads it: itself in float32, else a 16-bit copy.
  Tensor operand(const Tensor& t) { return mixed(spec_) ? to_16bit(t, spec_.compute_dtype, context_) : t; }

  Conv2dSpec spec_;
  Context& context_;
  // x_desc_, y_desc_ and w_desc_ describe the operands (16-bit in mixed precision);
  // y_f32_desc_ the float32 output and gradient the bias works on.
  TensorDescriptor x_desc_, y_desc_, y_f32_desc_, bias_desc_;
  FilterDescriptor w_desc_;
  ConvolutionDescriptor conv_desc_;
  Choice<cudnnConvolutionFwdAlgo_t> forward_;
  Choice<cudnnConvolutionBwdDataAlgo_t> backward_data_;
  Choice<cudnnConvolutionBwdFilterAlgo_t> backward_filter_;
};

}  // namespace

std::unique_ptr<Conv2d> make_conv2d(const Conv2dSpec& spec) { return std::make_unique<CudnnConv2d>(spec); }

}  // namespace bigtrain::kernels::cuda
