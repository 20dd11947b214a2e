#pragma once
// BatchNorm2d over NCHW with per-channel gamma/beta, as PyTorch's BatchNorm2d.
// Training mode normalises with the batch statistics; frozen/inference mode with
// the running statistics (what streaming pipelines do for pretrained encoders).
#include <cstdint>
#include <memory>

#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels {

struct BatchNormSpec {
  std::int64_t batch = 1, channels = 1, height = 1, width = 1;
  float epsilon = 1e-5f;
  // ReLU on the output in the same pass, as oneDNN's fuse_norm_relu flag: forward
  // writes relu(bn(x)), and backward takes the gradient of that output with the
  // output itself, whose positive entries are where the ReLU let gradient through.
  // One pass over the activation less each way than the two layers, and no
  // tensor for the gradient between them. Results equal BatchNorm then ReLU.
  bool relu = false;
  // The end of a residual block in one pass: forward adds a same-shaped `residual`
  // to the normalised output before the ReLU, relu(bn(x) + residual), where
  // BatchNorm, add and ReLU would pass over memory 2 + 3 + 2 times (3 here).
  // Backward is BatchNorm's alone: it takes the gradient at bn(x) + residual, which
  // the caller forms with the ReLU's mask because the shortcut needs it too, and
  // takes no relu_output. Results equal BatchNorm, add, then ReLU.
  bool residual = false;
  // Whether backward takes the forward's output and applies the ReLU's mask itself.
  bool backward_masks_relu() const { return relu && !residual; }
  Shape input_shape() const { return {batch, channels, height, width}; }
  Shape channel_shape() const { return {channels}; }
  friend bool operator==(const BatchNormSpec&, const BatchNormSpec&) = default;
};

class BatchNorm2d {
 public:
  virtual ~BatchNorm2d() = default;
  // Writes y and the batch mean and 1/sqrt(var + eps) (biased variance) that
  // backward needs. When running_mean/running_var are given they are updated as
  // PyTorch does: r = (1 - momentum) r + momentum * batch_stat, with the unbiased
  // variance for running_var. The two-pass trainer passes them in one pass only.
  // `residual`: the shortcut added before the ReLU, given exactly when spec.residual.
  virtual void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                                Tensor& save_mean, Tensor& save_invstd, Tensor* running_mean,
                                Tensor* running_var, float momentum, const Tensor* residual = nullptr) = 0;
  virtual void forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& running_mean, const Tensor& running_var, Tensor& y,
                                 const Tensor* residual = nullptr) = 0;
  // Gradients through the batch statistics; overwrites dx, dgamma, dbeta.
  // `relu_output` is the forward's y when spec.backward_masks_relu(), else null.
  virtual void backward_training(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                                 const Tensor& save_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                                 const Tensor* relu_output) = 0;
  // Gradients with the running statistics held constant (frozen BatchNorm).
  virtual void backward_inference(const Tensor& x, const Tensor& dy, const Tensor& gamma,
                                  const Tensor& running_mean, const Tensor& running_var, Tensor& dx,
                                  Tensor& dgamma, Tensor& dbeta, const Tensor* relu_output) = 0;
};

std::unique_ptr<BatchNorm2d> make_batch_norm(Backend backend, const BatchNormSpec& spec);

}  // namespace bigtrain::kernels
