#pragma once
// The sum over batch and pixels of each channel of a 4-D float32 tensor, read in
// whatever layout it holds (NCHW, nChw8c/16c, nhwc): the bias gradient of a
// convolution whose primitive computes none (bf16), without reordering the output
// gradient into NCHW first (oneDNN 2.6's reduction primitive has only a reference
// implementation on these layouts, ~20 ms per ResNet-50 layer at 512x512).
#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels::cpu {

// sums: [C] float32, overwritten. Float partial sums over runs of at most 1024
// pixels, added in double in a fixed order: the result does not depend on the
// thread count, and differs between layouts only by the partials' grouping.
void channel_sums(const Tensor& x, Tensor& sums);

}  // namespace bigtrain::kernels::cpu
