#include "net/streaming_memory.hpp"

#include "net/encoder.hpp"
#include "net/memory_plan.hpp"

namespace bigtrain::net {

StreamMemory plan_stream_memory(Encoder& encoder, const StreamPlan& plan, const KernelMemoryModel& kernels) {
  StreamMemory memory;
  // The encoder's global average pooling after the trunk adds a [N, C] row: nothing.
  const EncoderPlan tile_plan = plan_encoder(encoder, plan.largest_input(), kernels, /*freeze_bn=*/true);
  memory.tile_step = tile_plan.train_peak;
  memory.cached_weights = tile_plan.cached_weights;
  memory.feature_map = allocation_bytes(plan.feature_map);
  memory.step_peak = memory.tile_step + 2 * memory.feature_map;
  memory.halo_overhead = plan.halo_overhead();
  return memory;
}

}  // namespace bigtrain::net
