#pragma once
// How a forward pass runs. The two-pass tile trainer runs the same tile batch twice:
//   pass 1: training, keep_activations = false, update_bn_running_stats = true
//   pass 2: training, keep_activations = true,  update_bn_running_stats = false
// so both passes compute the same outputs (BatchNorm normalises with the same batch
// statistics, dropout draws the same mask from the same seed and offset) while the
// running statistics move once per batch, as in one ordinary PyTorch step.
#include <cstdint>
#include <string>

#include "kernels/core/device.hpp"
#include "kernels/core/tensor.hpp"

namespace bigtrain::net {

// Sees every ReLU input of a pass before the kink is applied, and may change it in
// place (a non-in-place ReLU hands the hook a copy, so no other layer's tensor
// changes). Two backends that round differently can put an input within their
// rounding difference of 0 on opposite sides of the kink, after which every
// gradient upstream differs; the whole-network backend comparison
// (tests/net/relu_kinks.hpp) uses this to find such inputs and set them to exactly 0
// on both backends. Training and inference leave it unset.
class ReluInputHook {
 public:
  virtual ~ReluInputHook() = default;
  virtual void before_relu(const std::string& relu_name, Tensor& input) = 0;
};

struct ForwardContext {
  Backend backend = Backend::cpu;
  // BatchNorm with batch statistics (unless freeze_bn), dropout active.
  bool training = false;
  // Save what backward needs. Off for inference and pass 1: a layer then keeps
  // nothing, and memory holds one activation at a time.
  bool keep_activations = false;
  // Training BatchNorm folds the batch statistics into running_mean/var and counts
  // num_batches_tracked. Only when training and not freeze_bn.
  bool update_bn_running_stats = true;
  // BatchNorm normalises with its running statistics even when training, and its
  // backward holds them constant (pretrained encoders in streaming pipelines).
  bool freeze_bn = false;
  // Weight of the current batch in the running statistics. PyTorch's 0.1 normally;
  // calibration passes 1/(k+1) for batch k so the result is the plain average over
  // the calibration batches rather than an average dominated by the last few.
  float bn_momentum = 0.1f;  // BatchNorm2d::kMomentum
  // Dropout element i of a layer is kept when philox(mix(dropout_seed, layer), dropout_offset + i) >= p;
  // the trainer gives each tile batch its own offset and reuses it in pass 2.
  std::uint64_t dropout_seed = 0;
  std::uint64_t dropout_offset = 0;
  // Mixed precision (train.precision): the compute type of the Conv2d and Linear
  // layers this pass runs through (kernels::Conv2dSpec::compute_dtype); tensors
  // between layers stay float32. The trainer sets it for the encoder only: the
  // aggregator and head are a few small matrix products on one feature row per
  // tile, where 16 bits would save nothing and cost the attention softmax and the
  // logits their precision.
  DType compute_dtype = DType::f32;
  ReluInputHook* relu_input_hook = nullptr;
  // Where BatchNorm uses its running statistics (inference, evaluation, training
  // with frozen BatchNorm, kept or not), run each convolution with its BatchNorm,
  // residual add and ReLU as one op (net/conv_bn_fusion.hpp). Tests turn it off to
  // compare the fused network with the layer-by-layer one.
  bool fuse_conv_bn = true;
  // Training through it (activations kept) skips narrow convolutions, where fixed
  // costs outweigh the BatchNorm passes saved (net/conv_bn_fusion.cpp, fusable());
  // tests turn this on so that their small networks take the fused path too.
  bool fuse_narrow_training_convs = false;
  // A BatchNorm and the ReLU after it run as one op in every pass that runs them
  // layer by layer (kernels::BatchNormSpec::relu; training included), and so do a
  // residual block's last BatchNorm, shortcut add and ReLU (BatchNormSpec::residual),
  // bit for bit the layers' results. Off only to measure what it saves or to test that.
  bool fuse_norm_relu = true;
  // CPU: activations stay in oneDNN's blocked layout from one convolution to the
  // next (kernels::Conv2dSpec::blocked_outputs, Tensor::layout) instead of being
  // reordered into NCHW and back around each; off only to measure what it saves.
  bool blocked_activations = true;

  static ForwardContext inference(Backend backend) { return {.backend = backend}; }
  static ForwardContext train(Backend backend) {
    return {.backend = backend, .training = true, .keep_activations = true};
  }
};

}  // namespace bigtrain::net
