#pragma once
// Convolution through oneDNN primitives, built once per spec.
#include <memory>

#include "kernels/conv2d.hpp"

namespace bigtrain::kernels::cpu {

std::unique_ptr<Conv2d> make_conv2d(const Conv2dSpec& spec);

}  // namespace bigtrain::kernels::cpu
