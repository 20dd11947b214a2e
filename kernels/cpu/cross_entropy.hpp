#pragma once
#include "kernels/cross_entropy.hpp"

namespace bigtrain::kernels::cpu {

// Shapes and devices were validated by kernels/cross_entropy.cpp; target values
// are checked here, where they are read.
float cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor* class_weights,
                    const CrossEntropyOptions& options, Tensor& dlogits, Tensor* probabilities);

}  // namespace bigtrain::kernels::cpu
