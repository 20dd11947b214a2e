#include "pipeline/plan/plan_units.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "kernels/core/error.hpp"

namespace bigtrain {
namespace {

std::string lower(std::string_view text) {
  std::string out;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct Unit {
  const char* suffix;
  double factor;
};

}  // namespace

std::size_t parse_memory_size(std::string_view text) {
  const std::string s = lower(text);
  std::size_t digits = 0;
  while (digits < s.size() && (std::isdigit(static_cast<unsigned char>(s[digits])) || s[digits] == '.')) ++digits;
  double value = 0.0;
  const auto [end, error] = std::from_chars(s.data(), s.data() + digits, value);
  const std::string suffix = s.substr(digits);
  // Longest suffixes first so "gib" is not read as "g" + junk.
  static constexpr std::array<Unit, 16> units{{{"kib", 1024.0},
                                               {"mib", 1024.0 * 1024},
                                               {"gib", 1024.0 * 1024 * 1024},
                                               {"tib", 1024.0 * 1024 * 1024 * 1024},
                                               {"kb", 1e3},
                                               {"mb", 1e6},
                                               {"gb", 1e9},
                                               {"tb", 1e12},
                                               {"k", 1024.0},
                                               {"m", 1024.0 * 1024},
                                               {"g", 1024.0 * 1024 * 1024},
                                               {"t", 1024.0 * 1024 * 1024 * 1024},
                                               {"b", 1.0},
                                               {"", 1.0},
                                               {"bytes", 1.0},
                                               {"byte", 1.0}}};
  const Unit* unit = nullptr;
  for (const Unit& u : units)
    if (suffix == u.suffix) unit = &u;
  if (digits == 0 || error != std::errc() || end != s.data() + digits || unit == nullptr || !(value > 0.0))
    throw Error(fmt::format("memory size '{}' is not a positive number with a unit: write e.g. 2GiB, 512MiB, "
                            "1.5GiB, 2GB (10^9 bytes) or a byte count",
                            text));
  const double bytes = value * unit->factor;
  if (bytes >= 1.8e19) throw Error(fmt::format("memory size '{}' is too large", text));
  return static_cast<std::size_t>(std::llround(bytes));
}

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
