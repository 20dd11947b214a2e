#pragma once
// The host's allocator: the device allocator's scheme (kernels/core/block_allocator.hpp:
// best-fit blocks carved from segments, split and merged) on memory mapped from the
// kernel, with a soft cap.
//
// Why blocks rather than a cache of exact sizes: under train.memory_budget the
// allocator works at its bound, and a cache keyed by size must unmap a block of one
// size to map one of another at every miss. In the seeds' step (ResNet-50, 2435x2435,
// 1.7 GiB) that mapped and unmapped ~5.8 GB a step, each fresh page cleared by the
// kernel: 8-9% of the CPU time as system time. Carved from segments, a freed block
// serves the next request of any smaller size, so the step runs in the pages it has.
#include <cstddef>

#include "kernels/core/block_allocator.hpp"

namespace bigtrain {

class HostAllocator final : public BlockAllocator {
 public:
  HostAllocator();
  void* allocate(std::size_t bytes) override;

  // Small requests round to 64 bytes (a cache line); from 1 MiB up to 1/8 of their
  // power of two, so the last, partial tile batch's tensors take the blocks the full
  // batches freed without splitting them. What memory plans add up (net/footprint.cpp).
  static std::size_t rounded_size(std::size_t bytes);

  // Bounds what the allocator holds from the system, blocks in use and free: a new
  // segment that would pass `bytes` first returns wholly free ones. Blocks in use are
  // never touched, so they alone may exceed it. 0: no bound.
  void set_reserve_limit(std::size_t bytes) { set_limit(bytes); }
  std::size_t reserve_limit() const { return limit(); }
};

// The process-wide host allocator.
HostAllocator& host_allocator();

// A reserve limit on the host allocator for a scope (a training run), the previous
// one restored after it.
class ScopedHostReserveLimit {
 public:
  explicit ScopedHostReserveLimit(std::size_t bytes);
  ~ScopedHostReserveLimit();
  ScopedHostReserveLimit(const ScopedHostReserveLimit&) = delete;
  ScopedHostReserveLimit& operator=(const ScopedHostReserveLimit&) = delete;

 private:
  std::size_t previous_ = 0;
};

}  // namespace bigtrain
