#pragma once
// 2-D convolution (cross-correlation, as PyTorch's Conv2d): NCHW input, OIHW weight
// with I = in_channels / groups, optional bias of O. One interface; the reference
// (naive loops, the test oracle), oneDNN (cpu) and cuDNN (cuda) implement it.
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/core/error.hpp"
#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels {

// What a fused forward applies to the convolution's output (bias included), in the
// order the separate layers would: BatchNorm with its running statistics (inference,
// or frozen), the residual add, ReLU. One op instead of three passes over memory. A
// fused op runs forward only; training through it takes the plain op's backward and
// kernels/frozen_norm_conv.hpp for BatchNorm's share (net/conv_bn_fusion.hpp).
struct ConvEpilogue {
  bool batch_norm = false;
  float bn_epsilon = 1e-5f;
  bool residual = false;
  bool relu = false;
  bool any() const { return batch_norm || residual || relu; }
  friend bool operator==(const ConvEpilogue&, const ConvEpilogue&) = default;
};

// The epilogue's tensors: BatchNorm's gamma, beta, running mean and running variance
// ([out_channels] each) when epilogue.batch_norm; the residual (the output's shape)
// when epilogue.residual. Unused ones stay null.
struct ConvEpilogueInputs {
  const Tensor* gamma = nullptr;
  const Tensor* beta = nullptr;
  const Tensor* running_mean = nullptr;
  const Tensor* running_var = nullptr;
  const Tensor* residual = nullptr;
};

struct Conv2dSpec {
  std::int64_t batch = 1, in_channels = 1, out_channels = 1, in_h = 1, in_w = 1;
  int kernel_h = 1, kernel_w = 1;
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;
  bool bias = false;
  // Mixed precision (torch.autocast's per-op semantics): tensors stay float32, the
  // op rounds x, weight and dy to this type and accumulates in float32. f32, bf16
  // or f16; the reference backend defines the result (kernels/reference/round_to_dtype.hpp).
  DType compute_dtype = DType::f32;
  // Not empty: the op is forward-only and runs through forward_fused.
  ConvEpilogue epilogue;
  // CPU: y (forward) and dx (backward_data) may stay in the blocked layout oneDNN
  // chose (Tensor::layout) instead of being reordered into NCHW; the next oneDNN
  // op reads them as they are. Networks set it; op-level tests see NCHW. Inputs in
  // any layout are accepted either way. Other backends ignore it.
  bool blocked_outputs = false;

  std::int64_t out_h() const { return (in_h + 2 * pad_h - dilation_h * (kernel_h - 1) - 1) / stride_h + 1; }
  std::int64_t out_w() const { return (in_w + 2 * pad_w - dilation_w * (kernel_w - 1) - 1) / stride_w + 1; }
  Shape input_shape() const { return {batch, in_channels, in_h, in_w}; }
  Shape weight_shape() const { return {out_channels, in_channels / groups, kernel_h, kernel_w}; }
  Shape output_shape() const { return {batch, out_channels, out_h(), out_w()}; }
  void validate() const;  // throws bigtrain::Error for inconsistent parameters
  // 1x1, stride 1, unpadded, ungrouped: each output pixel is a matrix-vector product
  // of its input pixel, so over channels-last memory the whole op is one matrix
  // product (the CPU computes such a layer's weight gradient so in bf16).
  bool is_pointwise() const {
    return kernel_h == 1 && kernel_w == 1 && stride_h == 1 && stride_w == 1 && pad_h == 0 && pad_w == 0 &&
           groups == 1;
  }
  friend bool operator==(const Conv2dSpec&, const Conv2dSpec&) = default;
};

// Created once per layer and shape: implementations build their primitives or
// choose their algorithms in the constructor and reuse them on every call.
class Conv2d {
 public:
  virtual ~Conv2d() = default;
  virtual void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) = 0;
  // For a spec with an epilogue: y = epilogue(conv(x) + bias).
  virtual void forward_fused(const Tensor& x, const Tensor& weight, const Tensor* bias,
                             const ConvEpilogueInputs& epilogue, Tensor& y) = 0;
  virtual void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) = 0;
  // Overwrites dweight (and dbias when given); callers accumulate across batches.
  virtual void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) = 0;
  // Both backward passes of one batch (backward-data skipped when dx is null), with
  // the results of the two calls above. A backend that converts dy for its
  // primitives (bf16 operands, another layout) converts it once for both: for
  // ResNet-50 in bf16 that conversion is a quarter of the activations' reorders.
  // With `accumulate`, dweight and dbias receive the gradient added to what they
  // hold (a parameter's .grad summed over tile batches), through
  // adds_weight_gradients() where the backend can, else through a temporary and axpy.
  virtual void backward(const Tensor& x, const Tensor& dy, const Tensor& weight, Tensor* dx, Tensor& dweight,
                        Tensor* dbias, bool accumulate = false) {
    BT_CHECK(!accumulate, "conv2d: this backend does not add weight gradients itself");
    if (dx) backward_data(dy, weight, *dx);
    backward_weights(x, dy, dweight, dbias);
  }
  // Whether backward(..., accumulate = true) adds in place: the CPU adds while
  // reordering the gradient out of its primitive's layout, so the sum costs no pass
  // over the weights of its own and no temporary of their size.
  virtual bool adds_weight_gradients() const { return false; }
};

std::unique_ptr<Conv2d> make_conv2d(Backend backend, const Conv2dSpec& spec);

// Bytes of the library's own working memory one call of each pass takes from the
// caching allocator, as make_conv2d(backend, spec) would build it: oneDNN's
// scratchpads on the CPU (Winograd's transformed tiles: up to ~150 MB for 256
// channels at 56x56, batch 8), zero where the backend keeps none per call (cuDNN's
// workspace is shared and planned apart). For the memory plan.
struct Conv2dLibraryScratch {
  std::size_t forward = 0, backward_data = 0, backward_weights = 0;
};
Conv2dLibraryScratch conv2d_library_scratch(Backend backend, const Conv2dSpec& spec);

}  // namespace bigtrain::kernels
