#pragma once
// How a step's gradient tensors are grouped into collective calls on the GPU path
// (pipeline/distributed/distributed_nccl.cpp). One call per tensor would be ~160 small NCCL
// launches per step for ResNet-50, each paying the collective's latency; one flat
// copy of everything would double the gradients' device memory. Buckets of bounded
// size are both: few calls, bounded staging memory.
#include <cstddef>
#include <span>
#include <vector>

namespace bigtrain {

// The NCCL path's bound: 64 MiB of floats per collective call. ResNet-50's 25.6 M
// gradients take 2 calls, the staging buffer stays far below one tile batch's
// activations, and NCCL reaches its bus bandwidth at a few MiB per call already.
constexpr std::size_t kNcclBucketElements = (std::size_t{64} << 20) / sizeof(float);

// Tensors [first, end) of the step's list, summed by one collective call.
struct GradientBucket {
  std::size_t first = 0;
  std::size_t end = 0;
  std::size_t elements = 0;
  // A lone tensor is reduced where it lies; several are copied into one staging
  // buffer first (a collective call needs contiguous memory).
  bool staged() const { return end - first > 1; }
};

// Groups consecutive tensors (of `sizes` elements) greedily into buckets of at most
// `max_elements` elements, in order; a tensor larger than that is a bucket of its
// own, reduced in place (so staging never needs more than `max_elements`). Every
// tensor is in exactly one bucket.
std::vector<GradientBucket> bucket_gradients(std::span<const std::size_t> sizes, std::size_t max_elements);

}  // namespace bigtrain
