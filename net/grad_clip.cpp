#include "net/grad_clip.hpp"

#include <cmath>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kernels/core/error.hpp"
#include "kernels/elementwise.hpp"

namespace bigtrain::net {

double grad_norm(Backend backend, const std::vector<Parameter*>& params) {
  double sum = 0.0;
  for (const Parameter* param : params)
    if (param->grad.defined()) sum += kernels::sum_of_squares(backend, param->grad);
  return std::sqrt(sum);
}

double clip_grad_norm(Backend backend, const std::vector<Parameter*>& params, const GradClipOptions& options) {
  BT_CHECK(options.max_norm > 0.0 && std::isfinite(options.max_norm),
           "clip_grad_norm: max_norm must be positive and finite, got {}", options.max_norm);
  const double total_norm = grad_norm(backend, params);
  if (!std::isfinite(total_norm)) {
    if (options.error_if_nonfinite) {
      std::vector<std::string> offending;
      for (const Parameter* param : params)
        if (param->grad.defined() && !kernels::all_finite(backend, param->grad)) offending.push_back(param->name);
      throw Error(fmt::format("clip_grad_norm: the total gradient norm is {}; non-finite gradients in: {}",
                              total_norm, fmt::join(offending, ", ")));
    }
  }
  // PyTorch's constant: it keeps the clipped norm just below max_norm and avoids 0/0.
  const double coefficient = options.max_norm / (total_norm + 1e-6);
  // Scaling by a coefficient >= 1 is skipped (PyTorch clamps it to 1 and multiplies,
  // which changes nothing); a NaN coefficient does scale, spreading NaN as PyTorch does.
  if (!(coefficient >= 1.0)) {
    for (Parameter* param : params)
      if (param->grad.defined()) kernels::scale(backend, static_cast<float>(coefficient), param->grad);
  }
  return total_norm;
}

}  // namespace bigtrain::net
