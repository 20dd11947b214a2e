#pragma once
// GroupNorm in OpenMP loops over NCHW (oneDNN 2.6 has no group normalisation; its
// layer normalisation would need a reorder to and from a group-major layout).
#include <memory>

#include "kernels/group_norm.hpp"

namespace bigtrain::kernels::cpu {

std::unique_ptr<GroupNorm> make_group_norm(const GroupNormSpec& spec);

}  // namespace bigtrain::kernels::cpu
