#include "pipeline/experiments/sweep.hpp"

#include <cctype>
#include <sstream>

#include "kernels/core/error.hpp"

namespace bigtrain {

std::pair<std::string, std::vector<std::string>> parse_grid_axis(const std::string& text) {
  const std::size_t eq = text.find('=');
  BT_CHECK(eq != std::string::npos && eq > 0, "--grid '{}' must be key=value1,value2,... (e.g. tiler.tile=128,256)",
           text);
  std::pair<std::string, std::vector<std::string>> axis{text.substr(0, eq), {}};
  std::stringstream values(text.substr(eq + 1));
  std::string value;
  while (std::getline(values, value, ','))
    if (!value.empty()) axis.second.push_back(value);
  BT_CHECK(!axis.second.empty(), "--grid '{}' has no values after '='", text);
  return axis;
}

std::vector<std::vector<std::string>> grid_combinations(
    const std::vector<std::pair<std::string, std::vector<std::string>>>& axes) {
  std::vector<std::vector<std::string>> combos{{}};
  for (const auto& [key, values] : axes) {
    std::vector<std::vector<std::string>> next;
    for (const auto& combo : combos)
      for (const std::string& value : values) {
        next.push_back(combo);
        next.back().push_back(key + "=" + value);
      }
    combos = std::move(next);
  }
  return combos;
}

std::string combination_name(const std::vector<std::string>& overrides) {
  std::string name;
  for (const std::string& o : overrides) {
    const std::size_t eq = o.find('=');
    std::string key = o.substr(0, eq);
    if (const std::size_t dot = key.rfind('.'); dot != std::string::npos) key = key.substr(dot + 1);
    if (!name.empty()) name += "_";
    name += key + o.substr(eq + 1);
  }
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') c = '-';
  return name.empty() ? "run" : name;
}

}  // namespace bigtrain
