#pragma once
// A streamed feature map's cells as the instances of an aggregator (each cell of
// [1, C, h, w] one row of [h*w, C], row-major over the map), and the instances'
// gradient back to the map's layout: the attention aggregator over a whole image's
// cells, as StreamingCLAM does. The mean aggregator over the cells is global average
// pooling.
#include "kernels/core/tensor.hpp"

namespace bigtrain::net {

// [1, C, h, w] -> [h*w, C], on the map's device.
Tensor map_cells(const Tensor& map);
// [h*w, C] -> [1, C, h, w] (`map_shape`), on the cells' device.
Tensor map_from_cells(const Tensor& cells, const Shape& map_shape);

}  // namespace bigtrain::net
