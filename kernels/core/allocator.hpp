#pragma once
// Device memory with reuse and accounting. Training repeats the same tensor sizes
// every tile batch, so freed blocks are kept and handed out again: after the first
// step no call reaches the system allocator (whose page faults cost the CPU a large
// share of its speed). The counters are what every memory claim in bigtrain is
// measured with. The schemes: kernels/core/block_allocator.hpp (GPU) and
// kernels/core/host_allocator.hpp (host).
#include <cstddef>
#include <cstdint>

#include "kernels/core/device.hpp"

namespace bigtrain {

struct MemoryStats {
  std::size_t current_bytes = 0;   // handed out to tensors now
  std::size_t peak_bytes = 0;      // most handed out at once since the last reset_peak()
  std::size_t reserved_bytes = 0;  // held from the system: current plus cached
  std::uint64_t system_allocations = 0;  // calls that reached the system allocator
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes) = 0;
  virtual MemoryStats stats() const = 0;
  virtual void reset_peak() = 0;
  // Returns cached blocks to the system (e.g. between phases with different shapes).
  virtual void release_cached() = 0;
  virtual Device device() const = 0;
};

// The process-wide allocator of a device. Throws for a CUDA device when the
// backend is not compiled or no GPU is present.
Allocator& allocator_for(Device device);

}  // namespace bigtrain
