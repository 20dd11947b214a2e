#pragma once
// Where a benchmark's memory goes, phase by phase: a thread samples the resident set
// (/proc/self/statm) and the host allocator's counters every few milliseconds, and
// each phase records the most it saw together with glibc's heap (mallinfo2) at its
// end. The allocator's own peak says what tensors held at once; the resident set is
// what the machine paid, and the difference is the allocator's cache (blocks freed
// but kept), glibc's heap (freed to it but not returned) and everything outside
// the allocator (oneDNN's primitives and JIT code, thread stacks, the binary).
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/core/allocator.hpp"

namespace bigtrain::bench {

inline std::int64_t resident_bytes() {
  std::FILE* file = std::fopen("/proc/self/statm", "r");
  if (file == nullptr) return 0;
  long pages = 0, resident = 0;
  const int read = std::fscanf(file, "%ld %ld", &pages, &resident);
  std::fclose(file);
  return read == 2 ? static_cast<std::int64_t>(resident) * sysconf(_SC_PAGESIZE) : 0;
}

class MemoryProbe {
 public:
  explicit MemoryProbe(Allocator& allocator, std::chrono::milliseconds period = std::chrono::milliseconds(5))
      : allocator_(allocator), period_(period) {
    begin("start");
    sampler_ = std::thread([this] {
      while (!stop_.load()) {
        sample();
        std::this_thread::sleep_for(period_);
      }
    });
  }
  ~MemoryProbe() { stop(); }

  // Ends the running phase (recording it) and starts `name`.
  void begin(const std::string& name) {
    sample();
    std::lock_guard lock(mutex_);
    if (!current_.name.empty()) close_locked();
    current_ = Phase{name};
  }

  void stop() {
    if (stop_.exchange(true)) return;
    sampler_.join();
    sample();
    std::lock_guard lock(mutex_);
    close_locked();
  }

  nlohmann::json report() const {
    std::lock_guard lock(mutex_);
    nlohmann::json phases = nlohmann::json::array();
    for (const Phase& p : phases_)
      phases.push_back({{"phase", p.name},
                        {"max_rss_bytes", p.max_rss},
                        {"max_reserved_bytes", p.max_reserved},
                        {"max_current_bytes", p.max_current},
                        {"end_rss_bytes", p.end_rss},
                        {"end_reserved_bytes", p.end_reserved},
                        {"end_heap_arena_bytes", p.end_arena},
                        {"end_heap_free_bytes", p.end_heap_free},
                        {"end_mmapped_bytes", p.end_mmapped}});
    return phases;
  }

  std::int64_t max_rss() const {
    std::lock_guard lock(mutex_);
    std::int64_t most = 0;
    for (const Phase& p : phases_) most = std::max(most, p.max_rss);
    return std::max(most, current_.max_rss);
  }
  std::int64_t max_reserved() const {
    std::lock_guard lock(mutex_);
    std::int64_t most = 0;
    for (const Phase& p : phases_) most = std::max(most, p.max_reserved);
    return std::max(most, current_.max_reserved);
  }

 private:
  struct Phase {
    std::string name;
    std::int64_t max_rss = 0, max_reserved = 0, max_current = 0;
    std::int64_t end_rss = 0, end_reserved = 0, end_arena = 0, end_heap_free = 0, end_mmapped = 0;
  };

  void sample() {
    const std::int64_t rss = resident_bytes();
    const MemoryStats stats = allocator_.stats();
    std::lock_guard lock(mutex_);
    current_.max_rss = std::max(current_.max_rss, rss);
    current_.max_reserved = std::max(current_.max_reserved, static_cast<std::int64_t>(stats.reserved_bytes));
    current_.max_current = std::max(current_.max_current, static_cast<std::int64_t>(stats.current_bytes));
    current_.end_rss = rss;
    current_.end_reserved = static_cast<std::int64_t>(stats.reserved_bytes);
  }

  void close_locked() {
    const struct mallinfo2 heap = mallinfo2();
    current_.end_arena = static_cast<std::int64_t>(heap.arena);
    current_.end_heap_free = static_cast<std::int64_t>(heap.fordblks);
    current_.end_mmapped = static_cast<std::int64_t>(heap.hblkhd);
    phases_.push_back(current_);
  }

  Allocator& allocator_;
  std::chrono::milliseconds period_;
  mutable std::mutex mutex_;
  Phase current_;
  std::vector<Phase> phases_;
  std::atomic<bool> stop_{false};
  std::thread sampler_;
};

}  // namespace bigtrain::bench
