#pragma once
// Max/average 2-D pooling and global average pooling on a CUDA device (kernels in
// pooling.cu). The max-pool workspace is an i32 argmax tensor of the output's shape.
#include <memory>

#include "kernels/pooling.hpp"

namespace bigtrain::kernels::cuda {

std::unique_ptr<Pool2d> make_pool2d(const Pool2dSpec& spec);
void global_avg_pool_forward(const Tensor& x, Tensor& y);
void global_avg_pool_backward(const Tensor& dy, Tensor& dx);

}  // namespace bigtrain::kernels::cuda
