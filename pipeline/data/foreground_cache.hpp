#pragma once
// The tiles an image keeps after background filtering, computed once per process.
// Filtering decodes the whole image for its thumbnail; on the seed-scale set (33 of
// 361 tiles kept per 2435^2 image) that read cost more than the kept tiles' own, and
// every epoch and evaluation repeated it for the same answer: the kept tiles depend
// only on the image and the tiler settings that go into the key.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <opencv2/core/types.hpp>

namespace bigtrain {

struct ForegroundCacheStats {
  std::int64_t hits = 0, misses = 0;
};

// The kept tiles for `key` (the image's path and every setting they depend on),
// from `compute` on the first call for that key.
std::vector<cv::Rect> cached_foreground_tiles(const std::string& key,
                                              const std::function<std::vector<cv::Rect>()>& compute);
ForegroundCacheStats foreground_cache_stats();
void clear_foreground_cache();  // tests

}  // namespace bigtrain
