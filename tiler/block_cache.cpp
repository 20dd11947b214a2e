#include "tiler/block_cache.hpp"

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

namespace bigtrain::tiler {
namespace {

std::size_t capacity_from_environment() {
  const char* text = std::getenv("BIGTRAIN_TIFF_CACHE_MB");
  if (!text || !*text) return kDefaultBlockCacheBytes;
  std::size_t megabytes = 0;
  const auto [end, ec] = std::from_chars(text, text + std::strlen(text), megabytes);
  if (ec != std::errc() || *end != '\0' || megabytes > (std::size_t{1} << 20)) {
    spdlog::warn("BIGTRAIN_TIFF_CACHE_MB='{}' is not a number of MiB; using the default {} MiB", text,
                 kDefaultBlockCacheBytes >> 20);
    return kDefaultBlockCacheBytes;
  }
  return megabytes << 20;
}

}  // namespace

std::size_t BlockCache::KeyHash::operator()(const BlockKey& key) const {
  std::uint64_t h = key.source * 0x9E3779B97F4A7C15ULL;
  h ^= (static_cast<std::uint64_t>(static_cast<std::uint32_t>(key.level)) << 32 | key.index) + 0x7F4A7C15ULL + (h << 6) +
       (h >> 2);
  return static_cast<std::size_t>(h);
}

BlockCache::BlockCache(std::size_t capacity_bytes) : capacity_(capacity_bytes) {}

BlockCache& BlockCache::shared() {
  static BlockCache cache(capacity_from_environment());
  return cache;
}

std::uint64_t BlockCache::new_source_id() {
  static std::atomic<std::uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

bool BlockCache::would_keep(std::size_t block_bytes) const {
  std::lock_guard lock(mutex_);
  return charge_of(block_bytes) <= capacity_;
}

BlockCache::Block BlockCache::get(const BlockKey& key, const std::function<DecodedBlock()>& decode) {
  std::unique_lock lock(mutex_);
  if (auto found = entries_.find(key); found != entries_.end()) {
    Entry& entry = found->second;
    if (entry.block) {
      ++counts_.hits;
      lru_.splice(lru_.begin(), lru_, entry.position);
      return entry.block;
    }
    ++counts_.joined;
    std::shared_future<Block> pending = entry.pending;
    lock.unlock();
    return pending.get();
  }
  ++counts_.misses;
  std::promise<Block> promise;
  entries_[key].pending = promise.get_future().share();
  lock.unlock();

  Block block;
  try {
    block = std::make_shared<const DecodedBlock>(decode());
  } catch (...) {
    lock.lock();
    entries_.erase(key);
    lock.unlock();
    promise.set_exception(std::current_exception());
    throw;
  }
  lock.lock();
  // Only this thread removes a pending entry (eviction and erase_source skip them).
  Entry& entry = entries_.at(key);
  const std::size_t charge = charge_of(block->bytes.capacity());
  if (charge > capacity_) {
    entries_.erase(key);
  } else {
    entry.block = block;
    entry.pending = {};
    entry.charge = charge;
    lru_.push_front(key);
    entry.position = lru_.begin();
    bytes_ += charge;
    evict_locked();
  }
  lock.unlock();
  promise.set_value(block);
  return block;
}

void BlockCache::evict_locked() {
  while (bytes_ > capacity_ && !lru_.empty()) {
    const auto found = entries_.find(lru_.back());
    bytes_ -= found->second.charge;
    entries_.erase(found);
    lru_.pop_back();
    ++counts_.evictions;
  }
}

void BlockCache::erase_source(std::uint64_t source) {
  std::lock_guard lock(mutex_);
  for (auto it = lru_.begin(); it != lru_.end();) {
    if (it->source != source) {
      ++it;
      continue;
    }
    const auto found = entries_.find(*it);
    bytes_ -= found->second.charge;
    entries_.erase(found);
    it = lru_.erase(it);
  }
}

void BlockCache::set_capacity(std::size_t capacity_bytes) {
  std::lock_guard lock(mutex_);
  capacity_ = capacity_bytes;
  evict_locked();
}

BlockCacheStats BlockCache::stats() const {
  std::lock_guard lock(mutex_);
  BlockCacheStats stats = counts_;
  stats.capacity_bytes = capacity_;
  stats.bytes = bytes_;
  stats.entries = lru_.size();
  return stats;
}

}  // namespace bigtrain::tiler
