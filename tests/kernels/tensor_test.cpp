#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <vector>

#include "kernels/core/allocator.hpp"
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
  // The first block came back from the cache; only the second reached the system.
  EXPECT_EQ(after.system_allocations, before.system_allocations + 1);
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

TEST(Allocator, RoundingServesSlightlySmallerRequests) {
  EXPECT_EQ(CachingAllocator::rounded_size(1), 64u);
  EXPECT_EQ(CachingAllocator::rounded_size(64), 64u);
  EXPECT_EQ(CachingAllocator::rounded_size(65), 128u);
  const std::size_t big = 10'000'000;
  const std::size_t rounded = CachingAllocator::rounded_size(big);
  EXPECT_GE(rounded, big);
  EXPECT_LE(rounded, big + big / 8);
  EXPECT_EQ(CachingAllocator::rounded_size(big - 1000), rounded);
}

// A reserve limit returns cached blocks of other sizes before a new block would
// take the allocator past it; without one the cache keeps them.
TEST(Allocator, AReserveLimitReturnsCachedBlocksFirst) {
  HostAllocator host;  // its own, so that no other test's blocks are in its cache
  const std::size_t a = std::size_t{4} << 20, b = std::size_t{6} << 20;
  host.deallocate(host.allocate(a), a);
  host.deallocate(host.allocate(b), b);
  EXPECT_EQ(host.stats().reserved_bytes, a + b) << "no limit: both sizes stay cached";
  host.set_reserve_limit(a + b + a);
  const std::size_t c = std::size_t{5} << 20;
  void* block = host.allocate(c);
  EXPECT_EQ(host.stats().reserved_bytes, a + c) << "the largest cached block (b) went to make room for c";
  EXPECT_EQ(host.stats().current_bytes, c);
  host.deallocate(block, c);
  const std::uint64_t calls = host.stats().system_allocations;
  host.deallocate(host.allocate(a), a);
  EXPECT_EQ(host.stats().system_allocations, calls) << "a cached block of the size asked for is reused as before";
  host.set_reserve_limit(c);
  EXPECT_LE(host.stats().reserved_bytes, c) << "lowering the limit trims the cache at once";
  void* big = host.allocate(2 * c);
  EXPECT_EQ(host.stats().reserved_bytes, 2 * c) << "blocks in use may exceed the limit; the cache holds nothing then";
  host.deallocate(big, 2 * c);
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
