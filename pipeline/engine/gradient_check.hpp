#pragma once
// Numerical faults in training: a NaN or Inf gradient must stop the run before the
// optimizer spreads it into every weight (the loss alone can stay finite while a
// gradient overflows, e.g. inf * 0 behind a ReLU that cut the forward value).
#include <string>
#include <vector>

#include "kernels/core/device.hpp"
#include "net/parameter.hpp"

namespace bigtrain {

// The names of the parameters whose gradient holds a NaN or an Inf, in order.
std::vector<std::string> non_finite_gradients(Backend backend, const std::vector<net::Parameter*>& params);

}  // namespace bigtrain
