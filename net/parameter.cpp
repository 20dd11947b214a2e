#include "net/parameter.hpp"

#include "kernels/core/error.hpp"
#include "kernels/elementwise.hpp"

namespace bigtrain::net {

void Parameter::accumulate_grad(Backend backend, Tensor g) {
  BT_CHECK(g.shape() == value.shape(), "gradient of `{}` has shape {}, the parameter {}", name, shape_str(g.shape()),
           shape_str(value.shape()));
  if (!grad.defined()) {
    grad = std::move(g);
    return;
  }
  kernels::axpy(backend, 1.0f, g, grad);
}

void Parameter::zero_grad() {
  if (!grad.defined()) grad = Tensor::empty(value.shape(), value.dtype(), value.device());
  grad.zero();
}

std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

}  // namespace bigtrain::net
