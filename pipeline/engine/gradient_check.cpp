#include "pipeline/engine/gradient_check.hpp"

#include "kernels/elementwise.hpp"

namespace bigtrain {

std::vector<std::string> non_finite_gradients(Backend backend, const std::vector<net::Parameter*>& params) {
  std::vector<std::string> names;
  for (const net::Parameter* p : params)
    if (p->grad.defined() && !kernels::all_finite(backend, p->grad)) names.push_back(p->name);
  return names;
}

}  // namespace bigtrain
