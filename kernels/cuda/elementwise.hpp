#pragma once
// Element-wise ops on a CUDA device (kernels in elementwise.cu). Arguments are
// checked by the dispatch in kernels/elementwise.cpp.
#include <cstdint>

#include "kernels/elementwise.hpp"

namespace bigtrain::kernels::cuda {

void relu_forward(const Tensor& x, Tensor& y);
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx);
void add(const Tensor& a, const Tensor& b, Tensor& out);
void axpy(float alpha, const Tensor& x, Tensor& y);
void scale(float alpha, Tensor& x);
double sum_of_squares(const Tensor& x);
bool all_finite(const Tensor& x);
void dropout_forward(const Tensor& x, float p, std::uint64_t seed, std::uint64_t offset, Tensor& y, Tensor& mask);
void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx);

}  // namespace bigtrain::kernels::cuda
