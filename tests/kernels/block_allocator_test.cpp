// The device allocator's caching logic on host memory (HostSystemAllocator stands in
// for cudaMalloc): size classes, splitting, coalescing, the cap, the retry after
// returning the cache, and the accounting. Runs without a GPU; the CUDA instance of
// the same class is exercised by the CUDA tests (CudaAllocatorCap.*).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/core/block_allocator.hpp"
#include "kernels/core/error.hpp"
#include "kernels/core/out_of_memory.hpp"
#include "kernels/core/system_allocator.hpp"

namespace bigtrain {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

struct Fixture {
  explicit Fixture(std::size_t capacity = 0, std::size_t limit = 0, BlockPolicy policy = {}) {
    auto host = std::make_unique<HostSystemAllocator>(capacity);
    system = host.get();
    allocator = std::make_unique<BlockAllocator>(Device::cuda(0), std::move(host), limit, policy);
  }
  HostSystemAllocator* system = nullptr;
  std::unique_ptr<BlockAllocator> allocator;
};

std::ptrdiff_t distance(void* from, void* to) { return static_cast<char*>(to) - static_cast<char*>(from); }

TEST(BlockAllocator, SizeClassesArePyTorchs) {
  EXPECT_EQ(BlockAllocator::round_size(1), 512u);
  EXPECT_EQ(BlockAllocator::round_size(512), 512u);
  EXPECT_EQ(BlockAllocator::round_size(513), 1024u);
  EXPECT_EQ(BlockAllocator::segment_size(512), 2 * MiB);         // small pool
  EXPECT_EQ(BlockAllocator::segment_size(MiB), 2 * MiB);
  EXPECT_EQ(BlockAllocator::segment_size(MiB + 512), 20 * MiB);  // large, under 10 MiB
  EXPECT_EQ(BlockAllocator::segment_size(10 * MiB), 10 * MiB);   // large: rounded to 2 MiB
  EXPECT_EQ(BlockAllocator::segment_size(11 * MiB), 12 * MiB);
}

TEST(BlockAllocator, SmallRequestsSplitOneSegment) {
  Fixture f;
  void* a = f.allocator->allocate(1000);
  void* b = f.allocator->allocate(1000);
  void* c = f.allocator->allocate(100);
  EXPECT_EQ(f.system->allocations(), 1u);
  EXPECT_EQ(distance(a, b), 1024);
  EXPECT_EQ(distance(b, c), 1024);
  const MemoryStats stats = f.allocator->stats();
  EXPECT_EQ(stats.current_bytes, 1024u + 1024u + 512u);
  EXPECT_EQ(stats.reserved_bytes, 2 * MiB);
  EXPECT_EQ(f.allocator->free_blocks(), 1u);  // the rest of the segment
  for (void* p : {a, b, c}) f.allocator->deallocate(p, 0);
}

TEST(BlockAllocator, FreedNeighboursCoalesceIntoTheWholeSegment) {
  Fixture f;
  void* a = f.allocator->allocate(4096);
  void* b = f.allocator->allocate(4096);
  void* c = f.allocator->allocate(4096);
  f.allocator->deallocate(a, 0);
  f.allocator->deallocate(c, 0);  // merges with the segment's free tail
  EXPECT_EQ(f.allocator->free_blocks(), 2u);  // a alone; c + tail
  f.allocator->deallocate(b, 0);              // joins both sides
  EXPECT_EQ(f.allocator->free_blocks(), 1u);
  EXPECT_EQ(f.allocator->stats().current_bytes, 0u);
  // The merged block serves the largest small request from the start of the segment.
  void* whole = f.allocator->allocate(MiB);
  EXPECT_EQ(whole, a);
  EXPECT_EQ(f.system->allocations(), 1u);
  f.allocator->deallocate(whole, 0);
  f.allocator->release_cached();
  EXPECT_EQ(f.system->outstanding_bytes(), 0u);
  EXPECT_EQ(f.allocator->stats().reserved_bytes, 0u);
}

TEST(BlockAllocator, LargeSplitKeepsOnlyARemainderOverOneMiB) {
  Fixture f;
  void* a = f.allocator->allocate(2 * MiB);  // a 20 MiB segment, 18 MiB kept free
  void* b = f.allocator->allocate(5 * MiB);  // from the remainder
  EXPECT_EQ(f.system->allocations(), 1u);
  EXPECT_EQ(distance(a, b), static_cast<std::ptrdiff_t>(2 * MiB));
  f.allocator->deallocate(a, 0);
  f.allocator->deallocate(b, 0);
  EXPECT_EQ(f.allocator->free_blocks(), 1u);
  // 19.5 MiB leaves 0.5 MiB: too small for a large request, so it stays with the block.
  void* c = f.allocator->allocate(19 * MiB + MiB / 2);
  EXPECT_EQ(f.allocator->stats().current_bytes, 20 * MiB);
  EXPECT_EQ(f.allocator->free_blocks(), 0u);
  f.allocator->deallocate(c, 0);
}

TEST(BlockAllocator, BestFitTakesTheSmallestFreeBlockThatFits) {
  Fixture f;
  void* big = f.allocator->allocate(12 * MiB);    // own 12 MiB segment
  void* small = f.allocator->allocate(4 * MiB);   // 20 MiB segment: 4 used, 16 free
  void* fence = f.allocator->allocate(16 * MiB);  // fills it: nothing left free
  f.allocator->deallocate(big, 0);
  f.allocator->deallocate(small, 0);
  // Free blocks now: 12 MiB (big) and 4 MiB (small). 3 MiB goes to the 4 MiB one.
  void* p = f.allocator->allocate(3 * MiB);
  EXPECT_EQ(p, small);
  EXPECT_EQ(f.system->allocations(), 2u);
  f.allocator->deallocate(p, 0);
  f.allocator->deallocate(fence, 0);
}

// The failure: phases with different shapes. An exact-size cache needs new
// memory for each phase's sizes; blocks that split and merge serve them all from the
// segments of the first phase.
TEST(BlockAllocator, PhasesWithOtherShapesReuseTheSameSegments) {
  Fixture f;
  std::vector<void*> live;
  auto phase = [&](int count, std::size_t bytes) {
    for (int i = 0; i < count; ++i) live.push_back(f.allocator->allocate(bytes));
    for (void* p : live) f.allocator->deallocate(p, 0);
    live.clear();
  };
  phase(4, 24 * MiB);  // "pass 1": four 24 MiB segments
  EXPECT_EQ(f.allocator->stats().reserved_bytes, 96 * MiB);
  phase(8, 11 * MiB + 4096);  // "pass 2": two to a segment
  phase(12, 7 * MiB);         // "eval": three to a segment
  phase(36, 300 * 1024);      // small tensors: six to each of the small pool's 2 MiB segments
  EXPECT_EQ(f.system->allocations(), 4u + 6u);
  EXPECT_EQ(f.allocator->stats().reserved_bytes, 96 * MiB + 12 * MiB);
}

TEST(BlockAllocator, CapRefusesBeyondTheLimitWithAClearError) {
  Fixture f(0, 64 * MiB);
  MemoryPhase phase("pass 2");
  set_planned_device_bytes(48 * MiB);
  void* a = f.allocator->allocate(30 * MiB);
  void* b = f.allocator->allocate(30 * MiB);
  try {
    f.allocator->allocate(30 * MiB);
    FAIL() << "a third 30 MiB block fit under a 64 MiB cap";
  } catch (const OutOfMemoryError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
    EXPECT_NE(message.find("during pass 2"), std::string::npos) << message;
    EXPECT_NE(message.find("device.memory_limit 64.0 MiB"), std::string::npos) << message;
    EXPECT_NE(message.find("in use 60.0 MiB, peak 60.0 MiB, reserved 60.0 MiB"), std::string::npos) << message;
    EXPECT_NE(message.find("predicted 48.0 MiB"), std::string::npos) << message;
    EXPECT_EQ(error.info().requested, 30 * MiB);
  }
  set_planned_device_bytes(0);
  // The system was never asked for memory past the cap.
  EXPECT_EQ(f.system->allocations(), 2u);
  EXPECT_EQ(f.system->failures(), 0u);
  EXPECT_LE(f.allocator->peak_reserved_bytes(), 64 * MiB);
  f.allocator->deallocate(a, 0);
  f.allocator->deallocate(b, 0);
}

TEST(BlockAllocator, CapReturnsTheCacheAndRetriesOnce) {
  Fixture f(0, 64 * MiB);
  void* a = f.allocator->allocate(40 * MiB);
  f.allocator->deallocate(a, 0);  // 40 MiB cached; a 50 MiB segment would pass the cap
  void* b = f.allocator->allocate(50 * MiB);
  ASSERT_NE(b, nullptr);
  const MemoryStats stats = f.allocator->stats();
  EXPECT_EQ(f.allocator->cache_releases(), 1u);
  EXPECT_EQ(stats.reserved_bytes, 50 * MiB);
  EXPECT_EQ(f.system->frees(), 1u);
  f.allocator->deallocate(b, 0);
}

TEST(BlockAllocator, SystemFailureReturnsTheCacheAndRetriesOnce) {
  Fixture f(64 * MiB);  // a "card" of 64 MiB, no cap
  void* a = f.allocator->allocate(40 * MiB);
  f.allocator->deallocate(a, 0);
  void* b = f.allocator->allocate(50 * MiB);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(f.system->failures(), 1u);  // the first try
  EXPECT_EQ(f.allocator->cache_releases(), 1u);
  // Still failing after the retry: held memory cannot be returned.
  try {
    f.allocator->allocate(20 * MiB);
    FAIL() << "20 MiB fit beside 50 MiB in a 64 MiB system";
  } catch (const OutOfMemoryError& error) {
    EXPECT_NE(std::string(error.what()).find("host capacity of 67108864 bytes reached"), std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("device.memory_limit none"), std::string::npos) << error.what();
  }
  EXPECT_EQ(f.system->failures(), 3u);
  f.allocator->deallocate(b, 0);
}

TEST(BlockAllocator, SplitSegmentsAreNotReturnedWhileAPieceIsInUse) {
  Fixture f(0, 40 * MiB);
  void* a = f.allocator->allocate(2 * MiB);  // 20 MiB segment, 18 MiB free in it
  EXPECT_THROW(f.allocator->allocate(22 * MiB), OutOfMemoryError);  // 20 + 22 > 40
  EXPECT_EQ(f.allocator->stats().reserved_bytes, 20 * MiB);  // the used segment stayed
  f.allocator->deallocate(a, 0);
  void* b = f.allocator->allocate(22 * MiB);  // now the whole segment goes back
  EXPECT_EQ(f.allocator->stats().reserved_bytes, 22 * MiB);
  f.allocator->deallocate(b, 0);
}

TEST(BlockAllocator, LoweringTheLimitReleasesTheCache) {
  Fixture f;
  void* a = f.allocator->allocate(30 * MiB);
  f.allocator->deallocate(a, 0);
  EXPECT_EQ(f.allocator->stats().reserved_bytes, 30 * MiB);
  f.allocator->set_limit(16 * MiB);
  EXPECT_EQ(f.allocator->stats().reserved_bytes, 0u);
  EXPECT_EQ(f.allocator->limit(), 16 * MiB);
  EXPECT_THROW(f.allocator->allocate(17 * MiB), OutOfMemoryError);
}

TEST(BlockAllocator, PeakAndReservedAccounting) {
  Fixture f;
  void* a = f.allocator->allocate(12 * MiB);
  void* b = f.allocator->allocate(1000);
  MemoryStats stats = f.allocator->stats();
  EXPECT_EQ(stats.current_bytes, 12 * MiB + 1024);
  EXPECT_EQ(stats.peak_bytes, 12 * MiB + 1024);
  EXPECT_EQ(stats.reserved_bytes, 14 * MiB);
  EXPECT_EQ(stats.system_allocations, 2u);
  f.allocator->deallocate(a, 0);
  f.allocator->reset_peak();
  f.allocator->release_cached();
  stats = f.allocator->stats();
  EXPECT_EQ(stats.current_bytes, 1024u);
  EXPECT_EQ(stats.peak_bytes, 1024u);
  EXPECT_EQ(f.allocator->peak_reserved_bytes(), 14 * MiB);  // reset_peak came before the release
  EXPECT_EQ(stats.reserved_bytes, 2 * MiB);
  f.allocator->reset_peak();
  EXPECT_EQ(f.allocator->peak_reserved_bytes(), 2 * MiB);
  f.allocator->deallocate(b, 0);
}

// Random traffic: live blocks never overlap (each keeps its own byte pattern), and
// once everything is freed each segment is one free block again and goes back.
// The host's policy (kernels/core/host_allocator.hpp), on a size rounding of its kind.
std::size_t round_to_64(std::size_t bytes) { return (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64; }
constexpr BlockPolicy kSoftExact{.round = &round_to_64, .soft_limit = true, .exact_blocks = true};

void random_traffic_never_overlaps_and_fully_coalesces(Fixture& f) {
  std::mt19937 rng(18);
  std::uniform_int_distribution<int> pick_size(0, 3);
  struct Live {
    unsigned char* ptr;
    std::size_t bytes;
    unsigned char pattern;
  };
  std::vector<Live> live;
  // Every 509th byte and the last: the smallest block (700 bytes) holds two marks, so
  // two blocks that overlap share a marked byte.
  constexpr std::size_t stride = 509;
  auto mark = [](const Live& l) {
    for (std::size_t i = 0; i < l.bytes; i += stride) l.ptr[i] = l.pattern;
    l.ptr[l.bytes - 1] = l.pattern;
  };
  auto check = [](const Live& l) {
    for (std::size_t i = 0; i < l.bytes; i += stride)
      if (l.ptr[i] != l.pattern) return false;
    return l.ptr[l.bytes - 1] == l.pattern;
  };
  for (int step = 0; step < 1500; ++step) {
    if (!live.empty() && (live.size() > 40 || rng() % 2 == 0)) {
      const std::size_t i = rng() % live.size();
      ASSERT_TRUE(check(live[i])) << "block overwritten by another at step " << step;
      f.allocator->deallocate(live[i].ptr, live[i].bytes);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      static constexpr std::size_t kinds[] = {700, 300 * 1024, 3 * MiB + 12345, 11 * MiB};
      const std::size_t bytes = kinds[pick_size(rng)] + rng() % 4096;
      auto* ptr = static_cast<unsigned char*>(f.allocator->allocate(bytes));
      live.push_back({ptr, bytes, static_cast<unsigned char>(step)});
      mark(live.back());
    }
  }
  for (const Live& l : live) {
    ASSERT_TRUE(check(l));
    f.allocator->deallocate(l.ptr, l.bytes);
  }
  EXPECT_EQ(f.allocator->stats().current_bytes, 0u);
  EXPECT_EQ(f.allocator->free_blocks(), f.allocator->segments());
  f.allocator->release_cached();
  EXPECT_EQ(f.allocator->segments(), 0u);
  EXPECT_EQ(f.system->outstanding_bytes(), 0u);
}

TEST(BlockAllocator, RandomTrafficNeverOverlapsAndFullyCoalesces) {
  Fixture f;
  random_traffic_never_overlaps_and_fully_coalesces(f);
}

// With a soft cap well under the traffic's peak, segments are returned and taken at
// the bound all the time: the same guarantees hold.
TEST(BlockAllocator, SoftCapTrafficNeverOverlapsAndFullyCoalesces) {
  Fixture f(/*capacity=*/0, /*limit=*/48 * MiB, kSoftExact);
  random_traffic_never_overlaps_and_fully_coalesces(f);
  EXPECT_GT(f.allocator->cache_releases(), 0u) << "the traffic reached the cap";
}

TEST(BlockAllocator, SoftCapExceedsTheLimitForBlocksInUse) {
  Fixture f(/*capacity=*/0, /*limit=*/8 * MiB, kSoftExact);
  void* a = f.allocator->allocate(12 * MiB);
  EXPECT_EQ(f.allocator->stats().reserved_bytes, 12 * MiB);
  EXPECT_EQ(f.allocator->stats().current_bytes, 12 * MiB) << "exact blocks: the rounded request, no 2 MiB rounding";
  void* b = f.allocator->allocate(100);
  EXPECT_EQ(f.allocator->stats().current_bytes, 12 * MiB + 128);
  f.allocator->deallocate(a, 12 * MiB);
  f.allocator->deallocate(b, 100);
}

TEST(BlockAllocator, SoftCapSystemFailureNamesTheDeviceAndCause) {
  Fixture f(/*capacity=*/16 * MiB, /*limit=*/8 * MiB, kSoftExact);
  try {
    f.allocator->allocate(20 * MiB);
    FAIL() << "no error";
  } catch (const OutOfMemoryError&) {
    FAIL() << "a soft cap is a budget, not a device's capacity: no OutOfMemoryError";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cuda:0 allocation of 20"), std::string::npos) << message;
    EXPECT_NE(message.find("capacity"), std::string::npos) << message;
  }
}

TEST(OutOfMemoryMessage, NamesPhaseTensorCapAndPlan) {
  {
    MemoryPhase outer("eval");
    {
      MemoryPhase inner("heatmaps");
      EXPECT_STREQ(MemoryPhase::current(), "heatmaps");
    }
    EXPECT_STREQ(MemoryPhase::current(), "eval");
  }
  EXPECT_STREQ(MemoryPhase::current(), "");
  OutOfMemoryInfo info;
  info.device = Device::cuda(1);
  info.requested = 256 * MiB;
  info.limit = std::size_t{2} << 30;
  info.current = std::size_t{3} << 29;
  info.peak = std::size_t{7} << 28;
  info.reserved = std::size_t{15} << 27;
  info.planned = std::size_t{1} << 30;
  info.phase = "bn calibration";
  info.cause = "would pass the cap";
  info.tensor = "[16,64,256,256] f32";
  EXPECT_EQ(format_out_of_memory(info),
            "out of memory on cuda:1 during bn calibration: allocating tensor [16,64,256,256] f32 (256.0 MiB) would "
            "pass the cap; device.memory_limit 2.00 GiB, in use 1.50 GiB, peak 1.75 GiB, reserved 1.88 GiB, "
            "`bigtrain plan` predicted 1.00 GiB for this config. Lower train.tile_batch or tiler.tile, or raise "
            "device.memory_limit");
}

}  // namespace
}  // namespace bigtrain
