#pragma once
// Pooling on the CPU: oneDNN pooling primitives (built once per spec) for max and
// average pooling; OpenMP loops for global average pooling, a plain reduction.
#include <memory>

#include "kernels/pooling.hpp"

namespace bigtrain::kernels::cpu {

std::unique_ptr<Pool2d> make_pool2d(const Pool2dSpec& spec);
void global_avg_pool_forward(const Tensor& x, Tensor& y);
void global_avg_pool_backward(const Tensor& dy, Tensor& dx);

}  // namespace bigtrain::kernels::cpu
