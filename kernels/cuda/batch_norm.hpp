#pragma once
// BatchNorm2d through cuDNN's spatial batch normalisation; the frozen backward
// (running statistics held constant), which cuDNN lacks, in batch_norm.cu.
#include <memory>

#include "kernels/batch_norm.hpp"

namespace bigtrain::kernels::cuda {

std::unique_ptr<BatchNorm2d> make_batch_norm(const BatchNormSpec& spec);

}  // namespace bigtrain::kernels::cuda
