#include "pipeline/data/foreground_cache.hpp"

#include <map>
#include <mutex>

namespace bigtrain {

namespace {
struct Cache {
  std::mutex mutex;
  std::map<std::string, std::vector<cv::Rect>> tiles;  // 16 bytes a tile: a million tiles are 16 MiB
  ForegroundCacheStats stats;
};
Cache& cache() {
  static Cache instance;
  return instance;
}
}  // namespace

std::vector<cv::Rect> cached_foreground_tiles(const std::string& key,
                                              const std::function<std::vector<cv::Rect>()>& compute) {
  Cache& c = cache();
  {
    std::lock_guard lock(c.mutex);
    if (auto found = c.tiles.find(key); found != c.tiles.end()) {
      ++c.stats.hits;
      return found->second;
    }
    ++c.stats.misses;
  }
  // Computed outside the lock: other images' plans keep going meanwhile.
  std::vector<cv::Rect> kept = compute();
  std::lock_guard lock(c.mutex);
  c.tiles.emplace(key, kept);
  return kept;
}

ForegroundCacheStats foreground_cache_stats() {
  std::lock_guard lock(cache().mutex);
  return cache().stats;
}

void clear_foreground_cache() {
  std::lock_guard lock(cache().mutex);
  cache().tiles.clear();
  cache().stats = {};
}

}  // namespace bigtrain
