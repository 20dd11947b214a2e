#pragma once
// Convolution through cuDNN: descriptors built and algorithms chosen once per spec.
#include <memory>

#include "kernels/conv2d.hpp"

namespace bigtrain::kernels::cuda {

std::unique_ptr<Conv2d> make_conv2d(const Conv2dSpec& spec);

}  // namespace bigtrain::kernels::cuda
