#pragma once
// `bigtrain sweep`: one run per combination of `--grid key=v1,v2,...` values.
#include <string>
#include <utility>
#include <vector>

namespace bigtrain {

// "tiler.tile=128,256,512" -> {"tiler.tile", {"128", "256", "512"}}; throws
// bigtrain::Error for a missing '=', an empty key or no values.
std::pair<std::string, std::vector<std::string>> parse_grid_axis(const std::string& text);

// The cartesian product, first axis slowest: each combination as `key=value`
// overrides, in axis order.
std::vector<std::vector<std::string>> grid_combinations(
    const std::vector<std::pair<std::string, std::vector<std::string>>>& axes);

// "tile128_overlap32" from {"tiler.tile=128", "tiler.overlap=32"}: the last part of
// each key and its value, safe as a folder name.
std::string combination_name(const std::vector<std::string>& overrides);

}  // namespace bigtrain
