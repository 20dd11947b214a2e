#pragma once
// Sizes as users write them on the command line and as the plan prints them.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "kernels/core/memory_size.hpp"

namespace bigtrain {

// parse_memory_size ("2GiB"): kernels/core/memory_size.hpp, where the config reads it too.
// "2435x2435" -> {width, height}; throws bigtrain::Error for anything else.
std::pair<std::int64_t, std::int64_t> parse_image_size(std::string_view text);
// True when `text` looks like WxH (digits, 'x', digits).
bool looks_like_image_size(std::string_view text);

// "1.50 GiB", "512.0 MiB", "980 B".
std::string format_bytes(std::size_t bytes);
// "4.09 GFLOP", "1.23 TFLOP".
std::string format_flops(double flops);

}  // namespace bigtrain
