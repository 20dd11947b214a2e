#include "pipeline/data/resize_cache.hpp"

#include <functional>
#include <map>
#include <mutex>

#include "kernels/core/error.hpp"

namespace bigtrain {

MemoryImageSource::MemoryImageSource(std::string path, cv::Mat pixels, const tiler::ImageInfo& original)
    : info_(original), pixels_(std::move(pixels)) {
  info_.path = std::move(path);
  tiler::LevelInfo level;
  level.width = pixels_.cols;
  level.height = pixels_.rows;
  level.layout = tiler::Layout::whole;
  level.block_width = pixels_.cols;
  level.block_height = pixels_.rows;
  level.compression = "none";
  info_.levels = {level};
}

cv::Mat MemoryImageSource::read_region(int level, int64_t x, int64_t y, int64_t w, int64_t h) const {
  tiler::check_region(info_, level, x, y, w, h);
  return pixels_(cv::Rect(static_cast<int>(x), static_cast<int>(y), static_cast<int>(w), static_cast<int>(h))).clone();
}

namespace {
struct Cache {
  std::mutex mutex;
  std::map<std::pair<std::string, std::int64_t>, std::shared_ptr<const tiler::ImageSource>> images;
  ResizeCacheStats stats;
};
Cache& cache() {
  static Cache instance;
  return instance;
}
}  // namespace

std::shared_ptr<const tiler::ImageSource> cached_resized_image(const std::string& path, std::int64_t size,
                                                               std::int64_t capacity_bytes,
                                                               const std::function<cv::Mat()>& resize,
                                                               const tiler::ImageInfo& original) {
  Cache& c = cache();
  const auto key = std::make_pair(path, size);
  {
    std::lock_guard lock(c.mutex);
    if (auto found = c.images.find(key); found != c.images.end()) {
      ++c.stats.hits;
      return found->second;
    }
    ++c.stats.misses;
  }
  // Resized outside the lock: planners of other images keep going meanwhile.
  cv::Mat pixels = resize();
  auto source = std::make_shared<const MemoryImageSource>(path, pixels, original);
  const auto bytes = static_cast<std::int64_t>(pixels.total() * pixels.elemSize());
  std::lock_guard lock(c.mutex);
  if (c.stats.bytes + bytes <= capacity_bytes && c.images.emplace(key, source).second) {
    c.stats.bytes += bytes;
    ++c.stats.images;
  }
  return source;
}

ResizeCacheStats resize_cache_stats() {
  std::lock_guard lock(cache().mutex);
  return cache().stats;
}

void clear_resize_cache() {
  std::lock_guard lock(cache().mutex);
  cache().images.clear();
  cache().stats = {};
}

}  // namespace bigtrain
