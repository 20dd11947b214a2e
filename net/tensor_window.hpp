#pragma once
// Copies a spatial window between two NCHW tensors: a streaming tile's output into
// the whole feature map, the map's gradient into a tile. Tensor copies only (one
// per row of the window off the host), so it runs on any device without an op of
// its own; the rows it moves are few beside the convolutions of a tile.
#include <cstdint>

#include "kernels/core/tensor.hpp"

namespace bigtrain::net {

// A window of the spatial axes: rows [y, y+height), columns [x, x+width).
struct Window {
  std::int64_t y = 0, x = 0, height = 0, width = 0;
  friend bool operator==(const Window&, const Window&) = default;
};

// destination[:, :, to window] = source[:, :, from window] (same size; same batch,
// channel count and dtype; any devices).
void copy_window(const Tensor& source, const Window& from, Tensor& destination, std::int64_t to_y, std::int64_t to_x);

}  // namespace bigtrain::net
