#pragma once
// ||a - b|| / ||b|| in the L2 norm (||a - b|| when b is zero), on host copies: how
// far a gradient computed one way is from the reference way.
#include <cmath>

#include "kernels/core/tensor.hpp"

namespace bigtrain::testing {

inline double relative_error(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector(), y = b.to_vector();
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    diff += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    norm += static_cast<double>(y[i]) * y[i];
  }
  return norm == 0.0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

}  // namespace bigtrain::testing
