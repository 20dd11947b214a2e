#pragma once
// What a streamed training step (net/streaming.hpp) holds at its peak, from the
// memory planner (net/memory_plan.hpp): one tile's forward with activations kept
// and its backward, the largest tile's input included, beside the whole feature map
// and its gradient. The image itself is the reader's (the tiler reads regions).
#include <cstddef>

#include "net/footprint.hpp"
#include "net/streaming.hpp"

namespace bigtrain::net {

struct StreamMemory {
  std::size_t tile_step = 0;    // the largest tile's forward (kept) + backward, its input included
  std::size_t feature_map = 0;  // the map; its gradient is as large
  std::size_t step_peak = 0;    // tile_step + the map + its gradient
  double halo_overhead = 0.0;   // pixels read per forward over image pixels
};

// Above the parameters, their gradients and buffers (parameter_memory() counts those).
// compute_dtype: train.precision, the convolutions' operands.
StreamMemory plan_stream_memory(Encoder& encoder, const StreamPlan& plan, const KernelMemoryModel& kernels,
                                DType compute_dtype = DType::f32);

}  // namespace bigtrain::net
