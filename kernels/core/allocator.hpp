#pragma once
// Device memory with reuse and accounting. Training repeats the same tensor sizes
// every tile batch, so freed blocks are cached by size and handed out again: after
// the first step no call reaches the system allocator (whose page faults cost the
// CPU a large share of its speed). The counters are what every memory claim in
// bigtrain is measured with.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

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

// Caches freed blocks by rounded size. Thread-safe. The raw acquire/release of
// memory is left to the subclass (host aligned memory here, cudaMalloc for CUDA).
class CachingAllocator : public Allocator {
 public:
  ~CachingAllocator() override;
  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr, std::size_t bytes) override;
  MemoryStats stats() const override;
  void reset_peak() override;
  void release_cached() override;

  static std::size_t rounded_size(std::size_t bytes);

  // Bounds what the allocator holds from the system, blocks in use and cached: a
  // request that would take it past `bytes` first returns cached blocks, largest
  // first. The cache otherwise keeps every size any phase of a step used, which
  // under train.memory_budget would hold far more than the budget's tensors (ResNet-50
  // two-pass on 512-pixel tiles: 0.49 GB cached beside a 1.96 GB peak). 0: no bound.
  // Tensors in use are never touched: the bound can be exceeded by them alone.
  void set_reserve_limit(std::size_t bytes);
  std::size_t reserve_limit() const;

 protected:
  virtual void* system_allocate(std::size_t bytes) = 0;
  virtual void system_free(void* ptr, std::size_t bytes) = 0;
  // Subclasses call this from their destructor: system_free is pure virtual by then.
  void release_all_cached_locked();

 private:
  // Returns cached blocks, largest first, until at most `target` bytes are reserved.
  void trim_cache_locked(std::size_t target);

  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> cached_;  // rounded size -> free block
  MemoryStats stats_;
  std::size_t reserve_limit_ = 0;
};

class HostAllocator final : public CachingAllocator {
 public:
  ~HostAllocator() override;
  void* allocate(std::size_t bytes) override;
  Device device() const override { return Device::cpu(); }

 protected:
  void* system_allocate(std::size_t bytes) override;
  void system_free(void* ptr, std::size_t bytes) override;
};

// A reserve limit on the process-wide host allocator for a scope (a training run),
// the previous one restored after it.
class ScopedHostReserveLimit {
 public:
  explicit ScopedHostReserveLimit(std::size_t bytes);
  ~ScopedHostReserveLimit();
  ScopedHostReserveLimit(const ScopedHostReserveLimit&) = delete;
  ScopedHostReserveLimit& operator=(const ScopedHostReserveLimit&) = delete;

 private:
  CachingAllocator* host_ = nullptr;
  std::size_t previous_ = 0;
};

// The process-wide allocator of a device. Throws for a CUDA device when the
// backend is not compiled or no GPU is present.
Allocator& allocator_for(Device device);

}  // namespace bigtrain
