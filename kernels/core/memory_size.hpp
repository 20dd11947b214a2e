#pragma once
// Memory sizes as users write them: `bigtrain plan --memory`, device.memory_limit,
// train.cudnn_workspace. Here, below every folder that reads one.
#include <cstddef>
#include <string_view>

namespace bigtrain {

// "2GiB", "512MiB", "1.5 GiB", "2G" (binary, as most tools read it), "2GB" (decimal,
// 10^9), "4096" (bytes). Throws bigtrain::Error naming the text and the valid units.
std::size_t parse_memory_size(std::string_view text);

}  // namespace bigtrain
