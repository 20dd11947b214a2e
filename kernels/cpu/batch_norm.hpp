#pragma once
// BatchNorm2d on host NCHW tensors: per-channel OpenMP loops (see batch_norm.cpp
// for why not oneDNN's batch_normalization primitive).
#include <memory>

#include "kernels/batch_norm.hpp"

namespace bigtrain::kernels::cpu {

std::unique_ptr<BatchNorm2d> make_batch_norm(const BatchNormSpec& spec);

}  // namespace bigtrain::kernels::cpu
