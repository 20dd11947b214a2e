#pragma once
// Naive pooling loops, the oracle for the other backends. Max pooling's workspace
// is an i32 tensor of the output's shape holding each maximum's index within its
// input plane (h * W + w), as PyTorch's return_indices.
#include <memory>

#include "kernels/pooling.hpp"

namespace bigtrain::kernels::reference {

std::unique_ptr<Pool2d> make_pool2d(const Pool2dSpec& spec);
void global_avg_pool_forward(const Tensor& x, Tensor& y);
void global_avg_pool_backward(const Tensor& dy, Tensor& dx);

}  // namespace bigtrain::kernels::reference
