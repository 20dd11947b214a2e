#pragma once
// Element-wise ops. Stateless, so they are functions taking the backend; all
// tensors must share shape, dtype and the backend's device.
#include <cstdint>

#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels {

void relu_forward(Backend backend, const Tensor& x, Tensor& y);  // y may alias x
// Uses the forward output: dx = dy where y > 0, else 0 (the kink at 0 has gradient 0, as PyTorch).
void relu_backward(Backend backend, const Tensor& y, const Tensor& dy, Tensor& dx);

void add(Backend backend, const Tensor& a, const Tensor& b, Tensor& out);  // out may alias a or b
void axpy(Backend backend, float alpha, const Tensor& x, Tensor& y);        // y += alpha * x
void scale(Backend backend, float alpha, Tensor& x);                        // x *= alpha
double sum_of_squares(Backend backend, const Tensor& x);                    // accumulated in double
// True when every element is finite (NaN/Inf detection for loss and gradients).
bool all_finite(Backend backend, const Tensor& x);

// Inverted dropout with a counter-based RNG: element i is kept when
// philox(seed, offset + i) >= p, so CPU and CUDA draw the same mask and a
// recomputation (pass 2) reproduces pass 1 exactly. mask gets 1 (kept) or 0 (u8).
void dropout_forward(Backend backend, const Tensor& x, float p, std::uint64_t seed, std::uint64_t offset,
                     Tensor& y, Tensor& mask);
void dropout_backward(Backend backend, const Tensor& dy, const Tensor& mask, float p, Tensor& dx);

}  // namespace bigtrain::kernels
