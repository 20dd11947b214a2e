#pragma once
// How a forward pass runs. The two-pass tile trainer runs the same tile batch twice:
//   pass 1: training, keep_activations = false, update_bn_running_stats = true
//   pass 2: training, keep_activations = true,  update_bn_running_stats = false
// so both passes compute the same outputs (BatchNorm normalises with the same batch
// statistics, dropout draws the same mask from the same seed and offset) while the
// running statistics move once per batch, as in one ordinary PyTorch step.
#include <cstdint>

#include "kernels/core/device.hpp"

namespace bigtrain::net {

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

  static ForwardContext inference(Backend backend) { return {.backend = backend}; }
  static ForwardContext train(Backend backend) {
    return {.backend = backend, .training = true, .keep_activations = true};
  }
};

}  // namespace bigtrain::net
