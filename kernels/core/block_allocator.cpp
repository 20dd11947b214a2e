#include "kernels/core/block_allocator.hpp"

#include <algorithm>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "kernels/core/out_of_memory.hpp"

namespace bigtrain {

// A piece of a segment. Blocks of one segment form a list in address order, so a
// freed block finds its neighbours without a search.
struct BlockAllocator::Block {
  std::size_t size = 0;
  char* ptr = nullptr;
  bool small = false;
  bool allocated = false;
  Block* prev = nullptr;
  Block* next = nullptr;
};

bool BlockAllocator::BySizeThenAddress::operator()(const Block* a, const Block* b) const {
  if (a->size != b->size) return a->size < b->size;
  return std::less<const char*>()(a->ptr, b->ptr);
}

BlockAllocator::BlockAllocator(Device device, std::unique_ptr<SystemAllocator> system, std::size_t limit,
                               BlockPolicy policy)
    : device_(device), system_(std::move(system)), limit_(limit), policy_(policy) {
  BT_CHECK(system_ != nullptr, "BlockAllocator for {} needs a system allocator", device.str());
  if (policy_.round == nullptr) policy_.round = &round_size;
}

BlockAllocator::~BlockAllocator() {
  // Blocks still in use at exit belong to static tensors; their segments are left to
  // the process teardown (the driver frees device memory with the context).
  std::lock_guard lock(mutex_);
  release_cached_locked();
  for (Pool* pool : {&small_, &large_}) {
    for (Block* block : *pool) delete block;
    pool->clear();
  }
  for (auto& [ptr, block] : active_) delete block;
}

std::size_t BlockAllocator::round_size(std::size_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return (bytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

std::size_t BlockAllocator::segment_size(std::size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

BlockAllocator::Block* BlockAllocator::take_free_block(Pool& pool, std::size_t size) {
  Block key;
  key.size = size;
  auto it = pool.lower_bound(&key);  // ptr nullptr: the first block of at least `size`
  if (it == pool.end()) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

BlockAllocator::Block* BlockAllocator::new_segment(std::size_t size, bool small) {
  if (limit_ != 0 && stats_.reserved_bytes + size > limit_) return nullptr;
  void* ptr = system_->allocate(size);
  if (ptr == nullptr) return nullptr;
  auto* block = new Block;
  block->size = size;
  block->ptr = static_cast<char*>(ptr);
  block->small = small;
  ++segments_;
  ++stats_.system_allocations;
  stats_.reserved_bytes += size;
  peak_reserved_ = std::max(peak_reserved_, stats_.reserved_bytes);
  return block;
}

void* BlockAllocator::allocate(std::size_t bytes) {
  const std::size_t size = policy_.round(bytes);
  const bool small = size <= kSmallSize;
  std::lock_guard lock(mutex_);
  Pool& pool = small ? small_ : large_;
  Block* block = take_free_block(pool, size);
  if (block == nullptr) {
    const std::size_t segment = segment_size(size);
    block = new_segment(segment, small);
    if (block == nullptr) {
      // What PyTorch does before giving up: hand wholly free segments back (of either
      // pool: the memory is the same) and try once more.
      ++cache_releases_;
      if (policy_.soft_limit)
        make_room_locked(segment);
      else
        release_cached_locked();
      block = new_segment(segment, small);
    }
    if (block == nullptr && policy_.soft_limit) {
      const std::size_t limit = std::exchange(limit_, 0);  // past the cap: tensors in use may exceed it
      block = new_segment(segment, small);
      limit_ = limit;
      if (block == nullptr)
        throw Error(fmt::format("{} allocation of {} failed: {}", device_.str(), format_memory_bytes(bytes),
                                system_->last_failure()));
    }
    if (block == nullptr) {
      const bool over_cap = limit_ != 0 && stats_.reserved_bytes + segment > limit_;
      throw_out_of_memory(bytes, over_cap ? fmt::format("would take the reserved memory to {} (a {} segment), past "
                                                        "the cap, even after returning the cache",
                                                        format_memory_bytes(stats_.reserved_bytes + segment),
                                                        format_memory_bytes(segment))
                                          : fmt::format("failed even after returning the cache ({})",
                                                        system_->last_failure()));
    }
  }
  // Keep the rest as a free block of its own when it can still serve a request of
  // its pool; a large-pool rest of 1 MiB or less would only ever serve small
  // requests, which never come to this pool, so it stays with the block.
  const std::size_t rest = block->size - size;
  if (policy_.exact_blocks ? rest > 0 : small ? rest >= kMinBlockSize : rest > kSmallSize) {
    auto* remainder = new Block;
    remainder->size = rest;
    remainder->ptr = block->ptr + size;
    remainder->small = small;
    remainder->prev = block;
    remainder->next = block->next;
    if (block->next != nullptr) block->next->prev = remainder;
    block->next = remainder;
    block->size = size;
    pool.insert(remainder);
  }
  block->allocated = true;
  active_.emplace(block->ptr, block);
  stats_.current_bytes += block->size;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  return block->ptr;
}

void BlockAllocator::deallocate(void* ptr, std::size_t) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = active_.find(ptr);
  BT_CHECK(it != active_.end(), "{}: freeing {} which this allocator did not hand out", device_.str(), ptr);
  Block* block = it->second;
  active_.erase(it);
  block->allocated = false;
  stats_.current_bytes -= block->size;
  Pool& pool = block->small ? small_ : large_;
  // Merge with free neighbours: they are in the pool, so take them out first.
  if (Block* prev = block->prev; prev != nullptr && !prev->allocated) {
    pool.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (block->next != nullptr) block->next->prev = prev;
    delete block;
    block = prev;
  }
  if (Block* next = block->next; next != nullptr && !next->allocated) {
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (next->next != nullptr) next->next->prev = block;
    delete next;
  }
  pool.insert(block);
}

namespace {
bool whole_segment(const auto* block) { return block->prev == nullptr && block->next == nullptr; }
}  // namespace

void BlockAllocator::free_segment_locked(Pool& pool, Pool::iterator it) {
  Block* block = *it;
  system_->free(block->ptr, block->size);
  stats_.reserved_bytes -= block->size;
  --segments_;
  delete block;
  pool.erase(it);
}

void BlockAllocator::release_cached_locked() {
  for (Pool* pool : {&small_, &large_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      const auto next = std::next(it);
      if (whole_segment(*it)) free_segment_locked(*pool, it);
      it = next;
    }
  }
}

void BlockAllocator::make_room_locked(std::size_t needed) {
  auto excess = [&] {
    return limit_ == 0 || stats_.reserved_bytes + needed <= limit_ ? 0 : stats_.reserved_bytes + needed - limit_;
  };
  if (excess() == 0) return;
  std::vector<std::pair<Pool*, Block*>> whole;
  for (Pool* pool : {&small_, &large_})
    for (Block* block : *pool)
      if (whole_segment(block)) whole.emplace_back(pool, block);
  std::sort(whole.begin(), whole.end(), [](const auto& a, const auto& b) { return a.second->size < b.second->size; });
  auto free_one = [&](const std::pair<Pool*, Block*>& w) { free_segment_locked(*w.first, w.first->find(w.second)); };
  const auto alone = std::find_if(whole.begin(), whole.end(), [&](const auto& w) { return w.second->size >= excess(); });
  if (alone != whole.end()) {
    free_one(*alone);
    return;
  }
  for (auto it = whole.rbegin(); it != whole.rend() && excess() > 0; ++it) free_one(*it);
}

void BlockAllocator::release_cached() {
  std::lock_guard lock(mutex_);
  release_cached_locked();
}

void BlockAllocator::set_limit(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  limit_ = bytes;
  if (limit_ != 0 && stats_.reserved_bytes > limit_) release_cached_locked();
}

std::size_t BlockAllocator::limit() const {
  std::lock_guard lock(mutex_);
  return limit_;
}

MemoryStats BlockAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void BlockAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
  peak_reserved_ = stats_.reserved_bytes;
}

std::size_t BlockAllocator::peak_reserved_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_reserved_;
}

std::uint64_t BlockAllocator::cache_releases() const {
  std::lock_guard lock(mutex_);
  return cache_releases_;
}

std::size_t BlockAllocator::free_blocks() const {
  std::lock_guard lock(mutex_);
  return small_.size() + large_.size();
}

std::size_t BlockAllocator::segments() const {
  std::lock_guard lock(mutex_);
  return segments_;
}

void BlockAllocator::throw_out_of_memory(std::size_t requested, std::string cause) const {
  OutOfMemoryInfo info;
  info.device = device_;
  info.requested = requested;
  info.limit = limit_;
  info.current = stats_.current_bytes;
  info.peak = stats_.peak_bytes;
  info.reserved = stats_.reserved_bytes;
  info.planned = planned_device_bytes();
  info.phase = MemoryPhase::current();
  info.cause = std::move(cause);
  throw OutOfMemoryError(std::move(info));
}

BlockAllocator& device_block_allocator(Device device) {
  BT_CHECK(device.is_cuda(), "device.memory_limit caps a CUDA device's memory, not the host's ({})", device.str());
  auto* blocks = dynamic_cast<BlockAllocator*>(&allocator_for(device));
  BT_CHECK(blocks != nullptr, "the allocator of {} is not a BlockAllocator", device.str());
  return *blocks;
}

void set_device_memory_limit(Device device, std::size_t bytes) { device_block_allocator(device).set_limit(bytes); }

}  // namespace bigtrain
