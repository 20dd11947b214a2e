#pragma once
// The layout of tiles over an image: pure geometry, no I/O.
//
// Tiles are T x T with overlap O (stride T - O). Columns start at 0, S, 2S, ...
// until one reaches the right edge; the border policy decides the last ones:
//   pad   - the last tile may extend past the image (read_tile pads it);
//   shift - the last column/row is moved inward to end at the image edge, so every
//           tile lies inside the image (an image smaller than T keeps one padded tile);
//   drop  - tiles that would extend past the image are left out.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <opencv2/core/types.hpp>

#include "tiler/border_policy.hpp"

namespace bigtrain::tiler {

struct Tile {
  cv::Rect rect;  // in the pixel coordinates of the grid's image (may pass the edge with `pad`)
  int row = 0;
  int col = 0;
};

class TileGrid {
 public:
  // Throws bigtrain::Error for a size, tile or overlap that makes no grid.
  TileGrid(int64_t width, int64_t height, int tile, int overlap, BorderPolicy border);

  const std::vector<Tile>& tiles() const { return tiles_; }
  int rows() const { return rows_; }
  int cols() const { return cols_; }
  int64_t width() const { return width_; }
  int64_t height() const { return height_; }
  int tile_size() const { return tile_; }
  int overlap() const { return overlap_; }
  BorderPolicy border() const { return border_; }
  // Tiles a full grid (policy pad) would have had that `drop` left out.
  int dropped_at_border() const { return dropped_at_border_; }

 private:
  int64_t width_, height_;
  int tile_, overlap_;
  BorderPolicy border_;
  int rows_ = 0, cols_ = 0, dropped_at_border_ = 0;
  std::vector<Tile> tiles_;
};

}  // namespace bigtrain::tiler
