#pragma once
// The device allocator: PyTorch's CUDA caching allocator's scheme
// (c10/cuda/CUDACachingAllocator.cpp), on any SystemAllocator.
//
// Requests round up to 512 bytes. Those up to 1 MiB are served from the small pool,
// carved out of 2 MiB segments; larger ones from the large pool, out of 20 MiB
// segments (requests under 10 MiB) or segments of the request rounded to 2 MiB.
// A request takes the smallest free block of its pool that fits (best fit) and
// splits off the rest when the rest is still useful (>= 512 bytes small, > 1 MiB
// large); a freed block merges with free neighbours of its segment. So one segment
// serves the shapes of pass 1, pass 2, evaluation and heatmaps in turn instead of
// each phase caching blocks of its own exact sizes until the card is full.
//
// When the system allocation fails, or would take the reserved bytes past the cap
// (device.memory_limit), every wholly free segment is returned and the allocation
// tried once more; a second failure is an OutOfMemoryError (kernels/core/out_of_memory.hpp).
// The cap holds for reserved bytes, which is what the card must have: a large GPU
// capped at 2 GiB behaves as the user's 2 GiB card, fragmentation included.
//
// Single stream: a freed block may be handed out at once, because every user of the
// device queues its work on the one compute stream (kernels/cuda/context.hpp).
//
// The host allocator (kernels/core/host_allocator.hpp) is the same scheme with a
// soft cap and exact blocks (BlockPolicy).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "kernels/core/allocator.hpp"
#include "kernels/core/system_allocator.hpp"

namespace bigtrain {

// What differs between a device, whose cap is its capacity, and the host, whose cap
// is a memory budget that tensors in use may exceed.
struct BlockPolicy {
  // Rounds a request up; blocks are carved in these sizes. Null: round_size (512 bytes).
  std::size_t (*round)(std::size_t bytes) = nullptr;
  // Past the cap, after returning free segments, a new segment is taken anyway
  // rather than an OutOfMemoryError thrown; and only as many free segments are
  // returned as make room, not all of them (each returned one is fresh pages later).
  bool soft_limit = false;
  // Every rest is split off, so a block is exactly its rounded request and
  // current_bytes is the sum of rounded requests (what memory plans add up); else a
  // large-pool rest of 1 MiB or less stays with its block, as in PyTorch.
  bool exact_blocks = false;
};

class BlockAllocator : public Allocator {
 public:
  static constexpr std::size_t kMinBlockSize = 512;
  static constexpr std::size_t kSmallSize = std::size_t{1} << 20;      // largest small-pool request
  static constexpr std::size_t kSmallBuffer = std::size_t{2} << 20;    // small-pool segment
  static constexpr std::size_t kLargeBuffer = std::size_t{20} << 20;   // segment for requests under kMinLargeAlloc
  static constexpr std::size_t kMinLargeAlloc = std::size_t{10} << 20;
  static constexpr std::size_t kRoundLarge = std::size_t{2} << 20;

  BlockAllocator(Device device, std::unique_ptr<SystemAllocator> system, std::size_t limit = 0,
                 BlockPolicy policy = {});
  ~BlockAllocator() override;
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;

  void* allocate(std::size_t bytes) override;
  void deallocate(void* ptr, std::size_t bytes) override;
  MemoryStats stats() const override;
  void reset_peak() override;
  // Returns every wholly free segment to the system.
  void release_cached() override;
  Device device() const override { return device_; }

  // Cap on reserved bytes (0: none). Lowering it below what is reserved now
  // releases the cache; blocks in use stay.
  void set_limit(std::size_t bytes);
  std::size_t limit() const;
  // The most reserved at once since the last reset_peak(): what the card must have.
  std::size_t peak_reserved_bytes() const;
  // Allocations that had to return the cache and try again.
  std::uint64_t cache_releases() const;
  // Free blocks and segments now, for tests and diagnostics.
  std::size_t free_blocks() const;
  std::size_t segments() const;

  static std::size_t round_size(std::size_t bytes);
  // The segment size a request of `rounded` bytes allocates when no block fits.
  static std::size_t segment_size(std::size_t rounded);

 private:
  struct Block;
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BySizeThenAddress>;

  Block* take_free_block(Pool& pool, std::size_t size);
  Block* new_segment(std::size_t size, bool small);
  void release_cached_locked();
  // Returns wholly free segments until `needed` more bytes fit under the cap: the
  // smallest one that makes room alone, else the largest first.
  void make_room_locked(std::size_t needed);
  void free_segment_locked(Pool& pool, Pool::iterator it);
  [[noreturn]] void throw_out_of_memory(std::size_t requested, std::string cause) const;

  Device device_;
  std::unique_ptr<SystemAllocator> system_;
  mutable std::mutex mutex_;
  std::size_t limit_ = 0;
  BlockPolicy policy_;
  Pool small_, large_;
  std::unordered_map<void*, Block*> active_;
  std::size_t segments_ = 0;
  std::size_t peak_reserved_ = 0;
  std::uint64_t cache_releases_ = 0;
  MemoryStats stats_;
};

// device.memory_limit: caps the bytes a CUDA device's allocator reserves (0: no
// cap), so a large GPU behaves as a small one. Throws for the host, which has no cap.
void set_device_memory_limit(Device device, std::size_t bytes);
// The device allocator of a CUDA device (throws for the host, or without a GPU).
BlockAllocator& device_block_allocator(Device device);

}  // namespace bigtrain
