#include "tiler/tile_grid.hpp"

#include "kernels/core/error.hpp"

namespace bigtrain::tiler {
namespace {

// Start offsets along one axis of `extent` pixels.
std::vector<int64_t> starts(int64_t extent, int tile, int stride, BorderPolicy border) {
  std::vector<int64_t> out;
  if (border == BorderPolicy::drop) {
    for (int64_t x = 0; x + tile <= extent; x += stride) out.push_back(x);
    return out;
  }
  // Enough starts to cover the extent: the last one is the first whose tile reaches the edge.
  for (int64_t x = 0;; x += stride) {
    out.push_back(x);
    if (x + tile >= extent) break;
  }
  if (border == BorderPolicy::shift && extent >= tile) out.back() = extent - tile;
  return out;
}

}  // namespace

std::optional<BorderPolicy> parse_border_policy(const std::string& name) {
  if (name == "pad") return BorderPolicy::pad;
  if (name == "shift") return BorderPolicy::shift;
  if (name == "drop") return BorderPolicy::drop;
  return std::nullopt;
}

const char* border_policy_name(BorderPolicy policy) {
  switch (policy) {
    case BorderPolicy::pad: return "pad";
    case BorderPolicy::shift: return "shift";
    case BorderPolicy::drop: return "drop";
  }
  return "?";
}

TileGrid::TileGrid(int64_t width, int64_t height, int tile, int overlap, BorderPolicy border)
    : width_(width), height_(height), tile_(tile), overlap_(overlap), border_(border) {
  BT_CHECK(width > 0 && height > 0 && width <= INT32_MAX && height <= INT32_MAX, "invalid image size {}x{} for a tile grid",
           width, height);
  BT_CHECK(tile > 0, "tile size must be positive, got {}", tile);
  BT_CHECK(overlap >= 0 && overlap < tile, "overlap must be in [0, tile size {}), got {}", tile, overlap);
  const int stride = tile - overlap;
  const std::vector<int64_t> xs = starts(width, tile, stride, border), ys = starts(height, tile, stride, border);
  // A grid is a plan held in memory; beyond this it is a typo (tile size 1 on a slide).
  BT_CHECK(xs.size() * ys.size() <= (size_t{1} << 26), "tile size {} over {}x{} makes {} tiles; use a larger tile", tile,
           width, height, xs.size() * ys.size());
  rows_ = static_cast<int>(ys.size());
  cols_ = static_cast<int>(xs.size());
  tiles_.reserve(xs.size() * ys.size());
  for (int r = 0; r < rows_; ++r)
    for (int c = 0; c < cols_; ++c)
      tiles_.push_back({cv::Rect(static_cast<int>(xs[c]), static_cast<int>(ys[r]), tile, tile), r, c});
  if (border == BorderPolicy::drop) {
    const auto full_x = starts(width, tile, stride, BorderPolicy::pad), full_y = starts(height, tile, stride, BorderPolicy::pad);
    dropped_at_border_ = static_cast<int>(full_x.size() * full_y.size() - tiles_.size());
  }
}

}  // namespace bigtrain::tiler
