#pragma once
// Softmax cross-entropy on a CUDA device (kernel in cross_entropy.cu).
#include "kernels/cross_entropy.hpp"

namespace bigtrain::kernels::cuda {

float cross_entropy(const Tensor& logits, const Tensor& targets, const Tensor* class_weights,
                    const CrossEntropyOptions& options, Tensor& dlogits, Tensor* probabilities);

}  // namespace bigtrain::kernels::cuda
