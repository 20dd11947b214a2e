#include "net/streaming_memory.hpp"

#include "net/encoder.hpp"
#include "net/memory_plan.hpp"

namespace bigtrain::net {

StreamMemory plan_stream_memory(Encoder& encoder, const StreamPlan& plan, const KernelMemoryModel& kernels,
                                DType compute_dtype) {
  StreamMemory memory;
  // The encoder's global average pooling after the trunk adds a [N, C] row: nothing.
  memory.tile_step = plan_encoder(encoder, plan.largest_input(), kernels, /*freeze_bn=*/true, compute_dtype).train_peak;
  memory.feature_map = allocation_bytes(plan.feature_map);
  memory.step_peak = memory.tile_step + 2 * memory.feature_map;
  memory.halo_overhead = plan.halo_overhead();
  return memory;
}

}  // namespace bigtrain::net
