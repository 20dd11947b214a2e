#include "kernels/core/allocator.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/core/error.hpp"

#ifdef BIGTRAIN_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif

namespace bigtrain {

namespace {
constexpr std::size_t kAlignment = 64;  // one cache line; what oneDNN and AVX-512 loads prefer
}

CachingAllocator::~CachingAllocator() = default;

std::size_t CachingAllocator::rounded_size(std::size_t bytes) {
  // Small sizes round to the alignment; large ones to 1/8 of their power of two, so
  // a block can serve a slightly smaller request (the last, partial tile batch)
  // without wasting more than 12.5%.
  bytes = std::max<std::size_t>(bytes, 1);
  if (bytes <= (std::size_t{1} << 20)) return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  std::size_t power = std::size_t{1} << (63 - __builtin_clzll(bytes));
  std::size_t step = power / 8;
  return (bytes + step - 1) / step * step;
}

void* CachingAllocator::allocate(std::size_t bytes) {
  const std::size_t size = rounded_size(bytes);
  std::lock_guard lock(mutex_);
  void* ptr = nullptr;
  if (auto it = cached_.find(size); it != cached_.end()) {
    ptr = it->second;
    cached_.erase(it);
  } else {
    ptr = system_allocate(size);
    ++stats_.system_allocations;
    stats_.reserved_bytes += size;
  }
  stats_.current_bytes += size;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, std::size_t bytes) {
  if (ptr == nullptr) return;
  const std::size_t size = rounded_size(bytes);
  std::lock_guard lock(mutex_);
  stats_.current_bytes -= size;
  cached_.emplace(size, ptr);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
}

void CachingAllocator::release_cached() {
  std::lock_guard lock(mutex_);
  release_all_cached_locked();
}

void CachingAllocator::release_all_cached_locked() {
  for (auto& [size, ptr] : cached_) {
    system_free(ptr, size);
    stats_.reserved_bytes -= size;
  }
  cached_.clear();
}

HostAllocator::~HostAllocator() { release_all_cached_locked(); }

namespace {
// BIGTRAIN_POISON_MEMORY=1 fills every host block handed out with 0xFF bytes (a
// float NaN), so code that reads a tensor before writing it (a stale cached block
// looks like valid data) turns into a NaN that tests catch.
bool poison_memory() {
  static const bool enabled = [] {
    const char* value = std::getenv("BIGTRAIN_POISON_MEMORY");
    return value != nullptr && value[0] != '\0' && value[0] != '0';
  }();
  return enabled;
}
}  // namespace

void* HostAllocator::allocate(std::size_t bytes) {
  void* ptr = CachingAllocator::allocate(bytes);
  if (poison_memory()) std::memset(ptr, 0xFF, rounded_size(bytes));
  return ptr;
}

void* HostAllocator::system_allocate(std::size_t bytes) {
  void* ptr = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  if (ptr == nullptr) {
    throw Error(fmt::format("host allocation of {} bytes failed: out of memory", bytes));
  }
  return ptr;
}

void HostAllocator::system_free(void* ptr, std::size_t) { std::free(ptr); }

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) {
    static HostAllocator host;
    return host;
  }
#ifdef BIGTRAIN_HAVE_CUDA
  return cuda::device_allocator(device.index);
#else
  throw Error(fmt::format("device {} requested, but this build of bigtrain has no CUDA backend "
                          "(configure with -DBIGTRAIN_CUDA=ON on a machine with the CUDA toolkit and cuDNN)",
                          device.str()));
#endif
}

}  // namespace bigtrain
