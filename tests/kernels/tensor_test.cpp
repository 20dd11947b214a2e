#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "kernels/core/allocator.hpp"
#include "kernels/core/host_allocator.hpp"
#include "kernels/core/error.hpp"
#include "kernels/core/tensor.hpp"

namespace bigtrain {
namespace {

TEST(Tensor, ContiguousStridesAndSlices) {
  Tensor t = Tensor::empty({4, 3, 2, 5});
  EXPECT_EQ(t.strides(), (Shape{30, 10, 5, 1}));
  for (int i = 0; i < t.numel(); ++i) t.f32()[i] = static_cast<float>(i);
  Tensor rows = t.slice_rows(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3, 2, 5}));
  EXPECT_EQ(rows.f32()[0], 30.0f);
  rows.f32()[0] = -1.0f;  // views share storage
  EXPECT_EQ(t.f32()[30], -1.0f);
  EXPECT_THROW(t.slice_rows(3, 5), Error);
  EXPECT_THROW(t.reshape({7}), Error);
  EXPECT_EQ(t.reshape({4, 30}).dim(1), 30);
}

TEST(Tensor, CloneIsIndependent) {
  std::vector<float> values{1, 2, 3, 4, 5, 6};
  Tensor a = Tensor::from_vector({2, 3}, values);
  Tensor b = a.clone();
  b.f32()[0] = 9;
  EXPECT_EQ(a.to_vector(), values);
  EXPECT_EQ(b.to_vector()[0], 9.0f);
}

TEST(Allocator, ReusesFreedBlocksAndTracksPeak) {
  Allocator& host = allocator_for(Device::cpu());
  host.release_cached();
  const std::size_t bytes = 3 << 20;
  { Tensor warm = Tensor::empty({static_cast<std::int64_t>(bytes / 4)}); }
  host.reset_peak();
  const MemoryStats before = host.stats();
  {
    Tensor a = Tensor::empty({static_cast<std::int64_t>(bytes / 4)});
    Tensor b = Tensor::empty({static_cast<std::int64_t>(bytes / 4)});
    EXPECT_GE(host.stats().current_bytes, before.current_bytes + 2 * bytes);
  }
  const MemoryStats after = host.stats();
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_GE(after.peak_bytes, before.current_bytes + 2 * bytes);
  // The warm-up's segment (20 MiB for requests under 10 MiB) serves both.
  EXPECT_EQ(after.system_allocations, before.system_allocations);
}

std::int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

// A streamed step releases the host cache between tile shapes and stages; that is
// only worth it when the memory leaves the process. glibc serves blocks up to 32 MiB
// from its heap once a freed mapping has raised its mmap threshold, and memory freed
// below a live allocation stays resident there (1.1 GiB for ResNet-50 streamed on
// 918x918 tiles): the host allocator maps its large blocks itself.
TEST(Allocator, ReleasedBlocksLeaveTheResidentSet) {
  Allocator& host = allocator_for(Device::cpu());
  host.release_cached();
  // Raises glibc's threshold as a freed large tensor would (volatile: a compiler may
  // drop a malloc that nothing reads).
  void* volatile large = std::malloc(std::size_t{30} << 20);
  std::free(large);
  constexpr std::int64_t kBlock = std::int64_t{8} << 20, kBlocks = 8;
  std::vector<Tensor> blocks;
  // Each block followed by something that stays alive, as the rest of a program
  // does: freed memory below a live allocation is not returned by glibc.
  std::vector<std::vector<char>> alive;
  for (std::int64_t i = 0; i < kBlocks; ++i) {
    blocks.push_back(Tensor::empty({kBlock / 4}));
    std::memset(blocks.back().raw_data(), 1, kBlock);
    alive.emplace_back(std::size_t{2} << 20, 1);
  }
  const std::int64_t held = resident_bytes();
  blocks.clear();
  host.release_cached();
  const std::int64_t released = held - resident_bytes();
  std::printf("[allocator] %lld MiB of blocks released, resident set %lld MiB lower\n",
              static_cast<long long>(kBlocks * kBlock >> 20), static_cast<long long>(released >> 20));
  EXPECT_GE(released, kBlocks * kBlock * 9 / 10);
  EXPECT_EQ(alive.back().back(), 1);
}

TEST(Allocator, HostRoundingServesSlightlySmallerRequests) {
  EXPECT_EQ(HostAllocator::rounded_size(1), 64u);
  EXPECT_EQ(HostAllocator::rounded_size(64), 64u);
  EXPECT_EQ(HostAllocator::rounded_size(65), 128u);
  const std::size_t big = 10'000'000;
  const std::size_t rounded = HostAllocator::rounded_size(big);
  EXPECT_GE(rounded, big);
  EXPECT_LE(rounded, big + big / 8);
  EXPECT_EQ(HostAllocator::rounded_size(big - 1000), rounded);
}

// Blocks are exactly their rounded request, so the allocator's current bytes are
// what memory plans add up (net/footprint.cpp), whatever segment serves them.
TEST(Allocator, HostBlocksAreTheirRoundedSize) {
  HostAllocator host;  // its own, so that no other test's blocks are in it
  const std::size_t sizes[] = {1, 1000, std::size_t{3} << 20, 10'000'000, 3'000'001};
  std::vector<void*> blocks;
  std::size_t expected = 0;
  for (std::size_t bytes : sizes) {
    blocks.push_back(host.allocate(bytes));
    expected += HostAllocator::rounded_size(bytes);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(blocks.back()) % 64, 0u) << bytes << " bytes: a cache line aligned";
  }
  EXPECT_EQ(host.stats().current_bytes, expected);
  for (std::size_t i = 0; i < blocks.size(); ++i) host.deallocate(blocks[i], sizes[i]);
  EXPECT_EQ(host.stats().current_bytes, 0u);
}

// Under a memory budget the allocator runs at its bound. A block freed there must
// serve the next request of another size without the system (each new mapping is
// fresh pages the kernel clears: 8-9% of the seeds' step when it did not).
TEST(Allocator, AtTheReserveLimitFreedMemoryServesOtherSizes) {
  HostAllocator host;
  const std::size_t mib = std::size_t{1} << 20;
  host.set_reserve_limit(64 * mib);
  void* a = host.allocate(40 * mib);
  host.deallocate(a, 40 * mib);
  const MemoryStats before = host.stats();
  for (std::size_t bytes : {12 * mib, 24 * mib, 30 * mib, 36 * mib}) {
    void* block = host.allocate(bytes);
    std::memset(block, 1, bytes);
    host.deallocate(block, bytes);
  }
  void* first = host.allocate(16 * mib);
  void* second = host.allocate(20 * mib);  // both from the 40 MiB segment
  EXPECT_EQ(host.stats().system_allocations, before.system_allocations) << "no request reached the system";
  EXPECT_EQ(host.stats().reserved_bytes, before.reserved_bytes);
  host.deallocate(first, 16 * mib);
  host.deallocate(second, 20 * mib);
}

// A new segment that would pass the limit first returns wholly free ones, only as
// many as make room; blocks in use are never touched and may exceed the limit alone.
TEST(Allocator, AReserveLimitReturnsFreeSegmentsFirst) {
  HostAllocator host;
  const std::size_t mib = std::size_t{1} << 20;
  void* a = host.allocate(12 * mib);
  void* b = host.allocate(14 * mib);
  void* c = host.allocate(16 * mib);
  host.deallocate(a, 12 * mib);
  host.deallocate(b, 14 * mib);
  host.deallocate(c, 16 * mib);
  EXPECT_EQ(host.stats().reserved_bytes, 42 * mib) << "no limit: every free segment stays";
  host.set_reserve_limit(60 * mib);
  void* d = host.allocate(30 * mib);  // needs 12 MiB of room: the 12 MiB segment alone makes it
  EXPECT_EQ(host.stats().reserved_bytes, 60 * mib) << "the smallest segment that makes room went, no other";
  host.deallocate(d, 30 * mib);
  void* big = host.allocate(80 * mib);
  EXPECT_EQ(host.stats().reserved_bytes, 80 * mib) << "a block in use may exceed the limit; every free segment went";
  EXPECT_EQ(host.stats().current_bytes, 80 * mib);
  host.deallocate(big, 80 * mib);
  host.set_reserve_limit(10 * mib);
  EXPECT_EQ(host.stats().reserved_bytes, 0u) << "lowering the limit returns what is free at once";
}

TEST(Device, CudaAllocatorWithoutDeviceIsAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "hardware: a CUDA device is present; this test covers machines without one";
  try {
    (void)allocator_for(Device::cuda());
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("cuda"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace bigtrain
