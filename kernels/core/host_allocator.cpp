#include "kernels/core/host_allocator.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <fmt/format.h>

namespace bigtrain {

namespace {

constexpr std::size_t kAlignment = 64;  // one cache line; what oneDNN and AVX-512 loads prefer
constexpr std::size_t kHugePage = std::size_t{2} << 20;

// Segments are mapped from the kernel and unmapped when returned, not taken from
// glibc: glibc serves blocks up to 32 MiB from its heap once a freed mapping has
// raised its mmap threshold, and memory freed in the middle of that heap stays
// resident (ResNet-50 streamed on 918x918 tiles: resident 3.1 GiB for an allocator
// peak of 1.6); unmapped, it is gone.
class MappedHostMemory final : public SystemAllocator {
 public:
  void* allocate(std::size_t bytes) override {
    void* ptr = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED) {
      last_failure_ = fmt::format("mapping {} bytes: {}", bytes, std::strerror(errno));
      return nullptr;
    }
    // Fresh pages are what mapping costs: 7 s per GiB first touched in 4 KiB pages on
    // a virtualised, loaded machine, 1 s in 2 MiB pages, 0.08 s for memory already
    // touched. Transparent huge pages where the kernel allows them (enabled=madvise);
    // a hint, ignored where it does not.
    if (bytes >= kHugePage) madvise(ptr, bytes, MADV_HUGEPAGE);
    return ptr;
  }
  void free(void* ptr, std::size_t bytes) override { munmap(ptr, bytes); }
  std::string last_failure() const override { return last_failure_; }

 private:
  std::string last_failure_;
};

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

std::size_t HostAllocator::rounded_size(std::size_t bytes) {
  bytes = std::max<std::size_t>(bytes, 1);
  if (bytes <= kSmallSize) return (bytes + kAlignment - 1) / kAlignment * kAlignment;
  const std::size_t power = std::size_t{1} << (63 - __builtin_clzll(bytes));
  const std::size_t step = power / 8;
  return (bytes + step - 1) / step * step;
}

HostAllocator::HostAllocator()
    : BlockAllocator(Device::cpu(), std::make_unique<MappedHostMemory>(), /*limit=*/0,
                     {.round = &HostAllocator::rounded_size, .soft_limit = true, .exact_blocks = true}) {}

void* HostAllocator::allocate(std::size_t bytes) {
  void* ptr = BlockAllocator::allocate(bytes);
  if (poison_memory()) std::memset(ptr, 0xFF, rounded_size(bytes));
  return ptr;
}

HostAllocator& host_allocator() {
  // Never destroyed: static tensors may outlive any other static.
  static auto* host = new HostAllocator;
  return *host;
}

ScopedHostReserveLimit::ScopedHostReserveLimit(std::size_t bytes) : previous_(host_allocator().reserve_limit()) {
  host_allocator().set_reserve_limit(bytes);
}

ScopedHostReserveLimit::~ScopedHostReserveLimit() { host_allocator().set_reserve_limit(previous_); }

}  // namespace bigtrain
