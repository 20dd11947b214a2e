#include "kernels/core/cudnn_algorithm_policy.hpp"

#include "kernels/core/error.hpp"

namespace bigtrain {

CudnnAlgorithmPolicy cudnn_algorithm_policy(const char* value) {
  const std::string_view choice = value != nullptr ? value : "";
  if (choice.empty()) return {};
  if (choice == "all") return {.allow_transforms = true, .prefer_deterministic = true};
  if (choice == "fastest") return {.allow_transforms = true, .prefer_deterministic = false};
  throw Error(fmt::format("BIGTRAIN_CUDNN_ALGOS={}: expected `all` (transform algorithms allowed) or `fastest` "
                          "(transforms and non-deterministic algorithms allowed), or unset",
                          choice));
}

}  // namespace bigtrain
