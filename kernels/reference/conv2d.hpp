#pragma once
// Naive convolution loops: the oracle every other backend is tested against. The
// loops are templated on the element type so tests run the very same code in double
// precision for finite-difference gradient checks; sums accumulate in double.
#include <memory>

#include "kernels/conv2d.hpp"

namespace bigtrain::kernels::reference {

// Contiguous NCHW x/y, OIHW w; b may be null (no bias).
template <typename T>
void conv2d_forward(const Conv2dSpec& spec, const T* x, const T* w, const T* b, T* y);
template <typename T>
void conv2d_backward_data(const Conv2dSpec& spec, const T* dy, const T* w, T* dx);
// db may be null.
template <typename T>
void conv2d_backward_weights(const Conv2dSpec& spec, const T* x, const T* dy, T* dw, T* db);

std::unique_ptr<Conv2d> make_conv2d(const Conv2dSpec& spec);

}  // namespace bigtrain::kernels::reference
