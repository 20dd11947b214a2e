#pragma once
// A bounded, thread-safe cache of decoded TIFF blocks (tiles or strips), in the
// spirit of OpenSlide's tile cache. Training reads overlapping tiles (64 px every
// 32 px) from files stored in 256 px blocks, and reads each image three times (the
// planner's thumbnail, pass 1, pass 2): without a cache every read re-inflates and
// re-un-predicts the whole blocks it touches, several times per block.
//
// Budget: one process-wide cache of kDefaultBlockCacheBytes (32 MiB, OpenSlide's
// default) unless BIGTRAIN_TIFF_CACHE_MB says otherwise (0 turns it off). One budget
// for all open images, not one per image, so memory stays bounded however many
// images are open at once (the tile stream plans ahead; infer opens one per image).
// 32 MiB holds every block of ~30 demo canvases (1 MiB each decoded) or 170 RGB
// 256x256 blocks of a slide, which is several rows of a 50000-px-wide level read in
// grid order. The bound counts each block's buffer capacity plus a fixed per-entry
// overhead; blocks being copied out by a reader when evicted stay alive until that
// copy ends, so the true peak may exceed the budget by one block per reading thread,
// plus malloc's slack: reading every 256x256 tile of a 20000x20000 RGB TIFF once
// (scripts/measure_tiler_rss, 2 threads) peaked at 105 MB RSS with the cache full,
// 58 MB with BIGTRAIN_TIFF_CACHE_MB=0.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace bigtrain::tiler {

inline constexpr std::size_t kDefaultBlockCacheBytes = std::size_t{32} << 20;

struct BlockKey {
  std::uint64_t source = 0;  // BlockCache::new_source_id() of the open image
  int level = 0;
  std::uint32_t index = 0;  // libtiff's tile or strip number (planes included)
  bool operator==(const BlockKey&) const = default;
};

struct DecodedBlock {
  std::vector<std::uint8_t> bytes;
  std::size_t valid = 0;  // bytes the decoder produced (a file's last strip may be short)
};

struct BlockCacheStats {
  std::size_t capacity_bytes = 0;
  std::size_t bytes = 0;  // charged now (see the header comment)
  std::size_t entries = 0;
  std::int64_t hits = 0;
  std::int64_t misses = 0;  // decodes started
  std::int64_t joined = 0;  // waited for another thread's decode of the same block
  std::int64_t evictions = 0;
};

class BlockCache {
 public:
  using Block = std::shared_ptr<const DecodedBlock>;
  // What one entry costs beyond its buffer: list and hash nodes, control block.
  static constexpr std::size_t kEntryOverhead = 256;

  explicit BlockCache(std::size_t capacity_bytes);
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;

  // The process-wide cache TIFF sources use unless told otherwise.
  static BlockCache& shared();
  // A fresh id for each open image: keys never collide, even when a closed image's
  // address is reused by the next one.
  static std::uint64_t new_source_id();

  // Whether a block of this many bytes would be kept (it fits the budget at all).
  bool would_keep(std::size_t block_bytes) const;
  // The cached block for `key`, else the result of `decode()` (kept if it fits).
  // Threads asking for a block another thread is decoding wait for that decode
  // instead of repeating it; if it throws, they get the same exception. `decode`
  // runs without the cache's lock held.
  Block get(const BlockKey& key, const std::function<DecodedBlock()>& decode);
  // Drops every block of one image (called when the image is closed).
  void erase_source(std::uint64_t source);
  // Evicts least recently used blocks until the new budget holds.
  void set_capacity(std::size_t capacity_bytes);
  BlockCacheStats stats() const;

 private:
  struct KeyHash {
    std::size_t operator()(const BlockKey& key) const;
  };
  struct Entry {
    Block block;  // null while being decoded
    std::shared_future<Block> pending;
    std::list<BlockKey>::iterator position;  // in lru_, once decoded
    std::size_t charge = 0;
  };
  static std::size_t charge_of(std::size_t block_bytes) { return block_bytes + kEntryOverhead; }
  void evict_locked();

  mutable std::mutex mutex_;
  std::size_t capacity_;
  std::size_t bytes_ = 0;
  std::unordered_map<BlockKey, Entry, KeyHash> entries_;
  std::list<BlockKey> lru_;  // most recently used first; decoded entries only
  BlockCacheStats counts_;
};

}  // namespace bigtrain::tiler
