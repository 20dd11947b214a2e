#pragma once
// Fully connected layer through cuBLAS (row-major tensors on column-major BLAS).
#include <memory>

#include "kernels/linear.hpp"

namespace bigtrain::kernels::cuda {

std::unique_ptr<Linear> make_linear(const LinearSpec& spec);

}  // namespace bigtrain::kernels::cuda
