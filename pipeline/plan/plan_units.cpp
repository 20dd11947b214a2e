#include "pipeline/plan/plan_units.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "kernels/core/error.hpp"

namespace bigtrain {

bool looks_like_image_size(std::string_view text) {
  const std::size_t x = text.find_first_of("xX");
  if (x == std::string_view::npos || x == 0 || x + 1 >= text.size()) return false;
  auto all_digits = [](std::string_view part) {
    for (char c : part)
      if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    return true;
  };
  return all_digits(text.substr(0, x)) && all_digits(text.substr(x + 1));
}

std::pair<std::int64_t, std::int64_t> parse_image_size(std::string_view text) {
  BT_CHECK(looks_like_image_size(text), "image size '{}' must be WIDTHxHEIGHT in pixels, e.g. 2435x2435", text);
  const std::size_t x = text.find_first_of("xX");
  std::int64_t width = 0, height = 0;
  const auto w = std::from_chars(text.data(), text.data() + x, width);
  const auto h = std::from_chars(text.data() + x + 1, text.data() + text.size(), height);
  BT_CHECK(w.ec == std::errc() && h.ec == std::errc() && width > 0 && height > 0 && width <= (std::int64_t{1} << 31) &&
               height <= (std::int64_t{1} << 31),
           "image size '{}' must be two positive pixel counts up to 2^31, e.g. 2435x2435", text);
  return {width, height};
}

std::string format_bytes(std::size_t bytes) {
  static constexpr std::array<const char*, 5> names{"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < names.size()) value /= 1024.0, ++unit;
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.{}f} {}", value, value < 10.0 ? 2 : 1, names[unit]);
}

std::string format_flops(double flops) {
  static constexpr std::array<const char*, 6> names{"FLOP", "kFLOP", "MFLOP", "GFLOP", "TFLOP", "PFLOP"};
  std::size_t unit = 0;
  while (flops >= 1000.0 && unit + 1 < names.size()) flops /= 1000.0, ++unit;
  return fmt::format("{:.{}f} {}", flops, flops < 10.0 ? 2 : 1, names[unit]);
}

}  // namespace bigtrain
