#include "kernels/core/allocator.hpp"

#include <sys/mman.h>

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
    if (reserve_limit_ != 0 && stats_.reserved_bytes + size > reserve_limit_)
      trim_cache_locked(reserve_limit_ - std::min(reserve_limit_, size));
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

void CachingAllocator::set_reserve_limit(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  reserve_limit_ = bytes;
  if (bytes != 0) trim_cache_locked(bytes);
}

std::size_t CachingAllocator::reserve_limit() const {
  std::lock_guard lock(mutex_);
  return reserve_limit_;
}

ScopedHostReserveLimit::ScopedHostReserveLimit(std::size_t bytes)
    : host_(dynamic_cast<CachingAllocator*>(&allocator_for(Device::cpu()))) {
  if (host_ == nullptr) return;
  previous_ = host_->reserve_limit();
  host_->set_reserve_limit(bytes);
}

ScopedHostReserveLimit::~ScopedHostReserveLimit() {
  if (host_ != nullptr) host_->set_reserve_limit(previous_);
}

void CachingAllocator::trim_cache_locked(std::size_t target) {
  while (stats_.reserved_bytes > target && !cached_.empty()) {
    const auto largest = std::prev(cached_.end());
    system_free(largest->second, largest->first);
    stats_.reserved_bytes -= largest->first;
    cached_.erase(largest);
  }
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

namespace {
// Blocks from 1 MiB up are mapped from the kernel and unmapped on release, not taken
// from glibc: glibc serves blocks up to 32 MiB from its heap once a freed mapping
// has raised its mmap threshold (its dynamic threshold), and memory freed in the
// middle of that heap stays resident. Releasing the cache between a streamed step's
// tile shapes left 1.1 GiB free but resident in glibc's heap (ResNet-50, 918x918
// tiles: resident 3.1 GiB for an allocator peak of 1.6); unmapped, it is gone.
constexpr std::size_t kMapThreshold = std::size_t{1} << 20;
constexpr std::size_t kHugePage = std::size_t{2} << 20;

bool mapped(std::size_t bytes) { return bytes >= kMapThreshold; }
}  // namespace

void* HostAllocator::system_allocate(std::size_t bytes) {
  void* ptr = nullptr;
  if (mapped(bytes)) {
    // Page aligned, which covers kAlignment.
    ptr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED) ptr = nullptr;
    // Fresh pages are what mapping costs: 7 s per GiB first touched in 4 KiB pages on
    // this (virtualised, loaded) machine, 1 s in 2 MiB pages, 0.08 s for memory
    // already touched. Transparent huge pages where the kernel allows them
    // (enabled=madvise); a hint, ignored where it does not.
    if (ptr != nullptr && bytes >= kHugePage) madvise(ptr, bytes, MADV_HUGEPAGE);
  } else {
    ptr = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  }
  if (ptr == nullptr) {
    throw Error(fmt::format("host allocation of {} bytes failed: out of memory", bytes));
  }
  return ptr;
}

void HostAllocator::system_free(void* ptr, std::size_t bytes) {
  if (mapped(bytes))
    munmap(ptr, bytes);
  else
    std::free(ptr);
}

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
