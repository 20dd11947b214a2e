#pragma once
// Softmax cross-entropy over logits [N,C] with integer targets [N] (i32), as
// PyTorch's cross_entropy with reduction='mean': optional per-class weights (the
// mean is then divided by the sum of the targets' weights) and label smoothing.
#include <cstdint>

#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels {

struct CrossEntropyOptions {
  float label_smoothing = 0.0f;
};

// Returns the loss and writes dlogits = d loss / d logits, and the softmax
// probabilities when `probabilities` is given.
float cross_entropy(Backend backend, const Tensor& logits, const Tensor& targets, const Tensor* class_weights,
                    const CrossEntropyOptions& options, Tensor& dlogits, Tensor* probabilities = nullptr);

}  // namespace bigtrain::kernels
