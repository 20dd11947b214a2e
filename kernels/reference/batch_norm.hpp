#pragma once
// Naive batch-norm loops: the oracle for every backend. Templated on the element
// type so tests run the same code in double for finite differences; channel sums
// accumulate in double and the variance is computed in two passes.
#include <memory>

#include "kernels/batch_norm.hpp"

namespace bigtrain::kernels::reference {

// running_mean/running_var may be null (no update). Statistics are per channel over N*H*W.
template <typename T>
void batch_norm_forward_training(const BatchNormSpec& spec, const T* x, const T* gamma, const T* beta, T* y,
                                 T* save_mean, T* save_invstd, T* running_mean, T* running_var, double momentum);
template <typename T>
void batch_norm_forward_inference(const BatchNormSpec& spec, const T* x, const T* gamma, const T* beta,
                                  const T* running_mean, const T* running_var, T* y);
template <typename T>
void batch_norm_backward_training(const BatchNormSpec& spec, const T* x, const T* dy, const T* gamma,
                                  const T* save_mean, const T* save_invstd, T* dx, T* dgamma, T* dbeta);
template <typename T>
void batch_norm_backward_inference(const BatchNormSpec& spec, const T* x, const T* dy, const T* gamma,
                                   const T* running_mean, const T* running_var, T* dx, T* dgamma, T* dbeta);

std::unique_ptr<BatchNorm2d> make_batch_norm(const BatchNormSpec& spec);

}  // namespace bigtrain::kernels::reference
