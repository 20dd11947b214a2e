#pragma once
// Convolution through oneDNN primitives, built once per spec. An object binds the
// caller's buffers into cached oneDNN memory objects on each call, so it serves one
// call at a time (the flow graph's device step is serial); separate objects are
// independent.
#include <memory>

#include "kernels/conv2d.hpp"

namespace bigtrain::kernels::cpu {

std::unique_ptr<Conv2d> make_conv2d(const Conv2dSpec& spec);

}  // namespace bigtrain::kernels::cpu
