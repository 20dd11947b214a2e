#pragma once
// Aggregator ops on a CUDA device (kernels in aggregation.cu), same signatures as
// kernels/cpu/aggregation.hpp.
#include "kernels/aggregation.hpp"

namespace bigtrain::kernels::cuda {

void mean_rows_forward(const Tensor& h, Tensor& z);
void mean_rows_backward(const Tensor& dz, Tensor& dh);
void max_rows_forward(const Tensor& h, Tensor& z, Tensor& argmax);
void max_rows_backward(const Tensor& dz, const Tensor& argmax, Tensor& dh);
void tanh_forward(const Tensor& x, Tensor& y);
void tanh_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
void sigmoid_forward(const Tensor& x, Tensor& y);
void sigmoid_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
void multiply(const Tensor& a, const Tensor& b, Tensor& out);
void softmax_forward(const Tensor& s, Tensor& a);
void softmax_backward(const Tensor& a, const Tensor& da, Tensor& ds);
void weighted_sum_rows_forward(const Tensor& a, const Tensor& h, Tensor& z);
void weighted_sum_rows_backward(const Tensor& a, const Tensor& h, const Tensor& dz, Tensor& da, Tensor& dh);

}  // namespace bigtrain::kernels::cuda
