#pragma once
// BatchNorm2d through oneDNN batch_normalization primitives, built once per spec.
#include <memory>

#include "kernels/batch_norm.hpp"

namespace bigtrain::kernels::cpu {

std::unique_ptr<BatchNorm2d> make_batch_norm(const BatchNormSpec& spec);

}  // namespace bigtrain::kernels::cpu
