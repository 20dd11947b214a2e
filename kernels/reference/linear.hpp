#pragma once
// Naive fully connected loops: the oracle for every backend. Templated on the
// element type so tests run the same code in double for finite differences.
#include <memory>

#include "kernels/linear.hpp"

namespace bigtrain::kernels::reference {

// x [batch, in], w [out, in], b [out] or null, y [batch, out].
template <typename T>
void linear_forward(const LinearSpec& spec, const T* x, const T* w, const T* b, T* y);
template <typename T>
void linear_backward_data(const LinearSpec& spec, const T* dy, const T* w, T* dx);
template <typename T>
void linear_backward_weights(const LinearSpec& spec, const T* x, const T* dy, T* dw, T* db);  // db may be null

std::unique_ptr<Linear> make_linear(const LinearSpec& spec);

}  // namespace bigtrain::kernels::reference
