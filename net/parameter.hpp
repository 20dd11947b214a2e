#pragma once
// Named state of a layer, named as in torchvision's state_dict ("layer1.0.conv1.weight")
// so checkpoints move between bigtrain and PyTorch without a translation table.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/tensor.hpp"

namespace bigtrain::net {

// A trainable tensor and its gradient. The gradient is ACCUMULATED by backward
// (+=), because the two-pass tile trainer calls backward once per tile batch and
// the optimizer steps once per `images_per_step` images. It stays undefined until
// the first backward or zero_grad() (an inference-only model never pays for it);
// optimizers skip a parameter whose grad is undefined, as PyTorch skips None.
struct Parameter {
  std::string name;
  Tensor value;
  Tensor grad;

  // grad += g; takes g as the gradient itself when none exists yet (no copy).
  void accumulate_grad(Backend backend, Tensor g);
  // Zeroes grad, allocating it (zeros, value's shape and device) when undefined.
  void zero_grad();
};

// Running statistics (BatchNorm's running_mean / running_var): saved and loaded
// with the model, never trained.
struct Buffer {
  std::string name;
  Tensor value;
};

// An integer counter in the state_dict (BatchNorm's num_batches_tracked, int64 in
// PyTorch). Kept on the host: nothing on the device reads it.
struct Counter {
  std::string name;
  std::int64_t value = 0;
};

// Pointers into a layer tree, gathered in construction order.
struct StateRefs {
  std::vector<Parameter*> parameters;
  std::vector<Buffer*> buffers;
  std::vector<Counter*> counters;
};

// "prefix.name", or just name for an empty prefix.
std::string join_name(const std::string& prefix, const std::string& name);

}  // namespace bigtrain::net
