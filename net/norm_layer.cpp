#include "net/norm_layer.hpp"

#include <numeric>

#include "net/batch_norm.hpp"
#include "net/group_norm.hpp"

namespace bigtrain::net {

std::unique_ptr<NormLayer> make_norm(const NormChoice& choice, std::string name, std::int64_t channels) {
  if (choice.kind == NormKind::group)
    return std::make_unique<GroupNorm>(std::move(name), std::gcd(static_cast<std::int64_t>(choice.groups), channels),
                                       channels);
  return std::make_unique<BatchNorm2d>(std::move(name), channels);
}

}  // namespace bigtrain::net
