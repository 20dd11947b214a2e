#pragma once
// What the last row and column of tiles do at the image edge (tiler/tile_grid.hpp),
// in a header of its own so that a config can name the choice without OpenCV.
#include <optional>
#include <string>

namespace bigtrain::tiler {

enum class BorderPolicy { pad, shift, drop };

std::optional<BorderPolicy> parse_border_policy(const std::string& name);
const char* border_policy_name(BorderPolicy policy);

}  // namespace bigtrain::tiler
