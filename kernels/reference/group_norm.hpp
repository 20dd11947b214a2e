#pragma once
// Naive group-norm loops: the oracle for every backend. Templated on the element
// type so tests run the same code in double for finite differences; sums in double,
// the variance in two passes.
#include <memory>

#include "kernels/group_norm.hpp"

namespace bigtrain::kernels::reference {

template <typename T>
void group_norm_forward(const GroupNormSpec& spec, const T* x, const T* gamma, const T* beta, T* y, T* save_mean,
                        T* save_invstd);
template <typename T>
void group_norm_backward(const GroupNormSpec& spec, const T* x, const T* dy, const T* gamma, const T* save_mean,
                         const T* save_invstd, T* dx, T* dgamma, T* dbeta);

std::unique_ptr<GroupNorm> make_group_norm(const GroupNormSpec& spec);

}  // namespace bigtrain::kernels::reference
