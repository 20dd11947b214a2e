#pragma once
// GroupNorm through the kernels of group_norm.cu (cuDNN has none).
#include <memory>

#include "kernels/group_norm.hpp"

namespace bigtrain::kernels::cuda {

std::unique_ptr<GroupNorm> make_group_norm(const GroupNormSpec& spec);

}  // namespace bigtrain::kernels::cuda
