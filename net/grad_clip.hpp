#pragma once
// Gradient clipping by global L2 norm, as torch.nn.utils.clip_grad_norm_(params,
// max_norm): the norm is taken over all gradients together, as if concatenated, and
// when it exceeds max_norm every gradient is scaled by max_norm / (norm + 1e-6).
#include <vector>

#include "kernels/core/device.hpp"
#include "net/parameter.hpp"

namespace bigtrain::net {

struct GradClipOptions {
  double max_norm = 1.0;
  // PyTorch's error_if_nonfinite: a NaN/Inf norm throws bigtrain::Error naming the
  // offending parameters instead of writing NaN into every gradient.
  bool error_if_nonfinite = false;
};

// Returns the total norm of the gradients before clipping. Parameters without a
// gradient are skipped; with none at all the norm is 0.
double clip_grad_norm(Backend backend, const std::vector<Parameter*>& params, const GradClipOptions& options);

// The global L2 norm alone (for logging), accumulated in double.
double grad_norm(Backend backend, const std::vector<Parameter*>& params);

}  // namespace bigtrain::net
