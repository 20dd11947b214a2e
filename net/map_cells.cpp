#include "net/map_cells.hpp"

#include "kernels/core/error.hpp"

namespace bigtrain::net {

namespace {

// The map is small (1/32 of the image a side) beside a tile's activations, so the
// transpose runs on the host, one copy each way off it, rather than as an op of its own.
Tensor transposed(const Tensor& source, std::int64_t rows, std::int64_t columns, const Shape& shape) {
  const Tensor host = source.device().is_cpu() ? source : source.to(Device::cpu());
  Tensor out = Tensor::empty(shape, DType::f32, Device::cpu());
  const float* in = host.f32();
  float* o = out.f32();
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < columns; ++c) o[c * rows + r] = in[r * columns + c];
  return source.device().is_cpu() ? out : out.to(source.device());
}

}  // namespace

Tensor map_cells(const Tensor& map) {
  BT_CHECK(map.rank() == 4 && map.dim(0) == 1 && map.dtype() == DType::f32,
           "map_cells: expects one float32 feature map [1, C, h, w], got {}", map.describe());
  const std::int64_t channels = map.dim(1), cells = map.dim(2) * map.dim(3);
  return transposed(map, channels, cells, {cells, channels});
}

Tensor map_from_cells(const Tensor& cells, const Shape& map_shape) {
  BT_CHECK(map_shape.size() == 4 && map_shape[0] == 1 && cells.rank() == 2 && cells.dtype() == DType::f32 &&
               cells.dim(0) == map_shape[2] * map_shape[3] && cells.dim(1) == map_shape[1],
           "map_from_cells: cells {} are not the cells of a map {}", cells.describe(), shape_str(map_shape));
  return transposed(cells, cells.dim(0), cells.dim(1), map_shape);
}

}  // namespace bigtrain::net
