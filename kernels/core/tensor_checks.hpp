#pragma once
// Argument checks shared by every op: the wrong shape or a tensor on the wrong
// device is an error naming the op and the argument, never a silent copy.
#include <string_view>

#include "kernels/core/error.hpp"
#include "kernels/core/tensor.hpp"

namespace bigtrain {

inline void expect_tensor(const Tensor& tensor, const Shape& shape, Backend backend, std::string_view op,
                          std::string_view argument) {
  BT_CHECK(tensor.defined(), "{}: argument `{}` is undefined", op, argument);
  BT_CHECK(tensor.shape() == shape, "{}: argument `{}` has shape {}, expected {}", op, argument,
           shape_str(tensor.shape()), shape_str(shape));
  BT_CHECK(tensor.device() == backend_device(backend), "{}: argument `{}` lives on {}, but the {} backend runs on {}",
           op, argument, tensor.device().str(), backend_name(backend), backend_device(backend).str());
}

}  // namespace bigtrain
