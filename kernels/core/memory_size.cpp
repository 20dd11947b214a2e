#include "kernels/core/memory_size.hpp"

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

}  // namespace bigtrain
