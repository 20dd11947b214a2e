#include "kernels/core/system_allocator.hpp"

#include <cstdlib>

#include <fmt/format.h>

namespace bigtrain {

void* HostSystemAllocator::allocate(std::size_t bytes) {
  if (capacity_ != 0 && outstanding_ + bytes > capacity_) {
    ++failures_;
    last_failure_ = fmt::format("host capacity of {} bytes reached ({} held, {} asked)", capacity_, outstanding_, bytes);
    return nullptr;
  }
  constexpr std::size_t alignment = 64;
  void* ptr = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
  if (ptr == nullptr) {
    ++failures_;
    last_failure_ = fmt::format("aligned_alloc of {} bytes failed", bytes);
    return nullptr;
  }
  outstanding_ += bytes;
  ++allocations_;
  return ptr;
}

void HostSystemAllocator::free(void* ptr, std::size_t bytes) {
  std::free(ptr);
  outstanding_ -= bytes;
  ++frees_;
}

}  // namespace bigtrain
