#pragma once
// Fully connected layer through oneDNN inner_product primitives, built once per spec.
#include <memory>

#include "kernels/linear.hpp"

namespace bigtrain::kernels::cpu {

std::unique_ptr<Linear> make_linear(const LinearSpec& spec);

}  // namespace bigtrain::kernels::cpu
