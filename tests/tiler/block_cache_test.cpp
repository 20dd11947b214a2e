// The decoded-block cache: LRU by bytes within its budget, one decode per block
// however many threads ask at once, failures not cached; and TIFF region reads
// through it equal reads without it in every layout (tiles, strips, separate
// planes, YCbCr, pyramids, image edges), serially and in parallel.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <tiffio.h>

#include "tiler/block_cache.hpp"
#include "tiler/tiff_source.hpp"
#include "tiler/tiff_writer.hpp"
#include "tiler_test_support.hpp"

namespace bigtrain::tiler {
namespace {

using testing::ScratchDir;

DecodedBlock block_of(std::size_t bytes, std::uint8_t fill) {
  DecodedBlock block;
  block.bytes.assign(bytes, fill);
  block.valid = bytes;
  return block;
}

constexpr std::size_t kBlock = 1000;
constexpr std::size_t kCharge = kBlock + BlockCache::kEntryOverhead;

TEST(BlockCache, KeepsTheMostRecentlyUsedBlocksWithinItsByteBudget) {
  BlockCache cache(3 * kCharge);
  int decodes = 0;
  auto get = [&](std::uint32_t index) {
    return cache.get({1, 0, index}, [&] {
      ++decodes;
      return block_of(kBlock, static_cast<std::uint8_t>(index));
    });
  };
  for (std::uint32_t i = 0; i < 3; ++i) EXPECT_EQ(get(i)->bytes[0], i);
  EXPECT_EQ(decodes, 3);
  EXPECT_EQ(get(0)->bytes[0], 0);  // a hit, and block 0 is now the most recent
  EXPECT_EQ(decodes, 3);
  get(3);  // over budget: block 1, the least recently used, goes
  EXPECT_EQ(decodes, 4);
  BlockCacheStats stats = cache.stats();
  EXPECT_EQ(stats.entries, 3u);
  EXPECT_EQ(stats.bytes, 3 * kCharge);
  EXPECT_LE(stats.bytes, stats.capacity_bytes);
  EXPECT_EQ(stats.evictions, 1);
  get(0);
  get(2);
  get(3);
  EXPECT_EQ(decodes, 4) << "blocks 0, 2 and 3 stayed";
  get(1);
  EXPECT_EQ(decodes, 5) << "block 1 was evicted";
  stats = cache.stats();
  EXPECT_EQ(stats.hits, 4);
  EXPECT_EQ(stats.misses, 5);

  cache.set_capacity(kCharge);
  stats = cache.stats();
  EXPECT_EQ(stats.entries, 1u);
  EXPECT_LE(stats.bytes, kCharge);
  get(1);  // the most recent survived the shrink
  EXPECT_EQ(decodes, 5);
}

TEST(BlockCache, BlocksOverTheBudgetAreDecodedButNotKept) {
  BlockCache cache(kCharge);
  EXPECT_TRUE(cache.would_keep(kBlock));
  EXPECT_FALSE(cache.would_keep(kBlock + 1));
  int decodes = 0;
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(cache.get({1, 0, 7}, [&] { ++decodes; return block_of(2 * kBlock, 9); })->bytes.size(), 2 * kBlock);
  EXPECT_EQ(decodes, 2);
  EXPECT_EQ(cache.stats().bytes, 0u);
  EXPECT_EQ(cache.stats().entries, 0u);
}

TEST(BlockCache, ConcurrentRequestsForOneBlockDecodeItOnce) {
  BlockCache cache(std::size_t{1} << 20);
  std::atomic<int> decodes{0};
  std::vector<std::thread> threads;
  std::vector<int> seen(8, -1);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      seen[t] = cache.get({3, 1, 5}, [&] {
                       ++decodes;
                       // Long enough that the other threads ask while it runs.
                       std::this_thread::sleep_for(std::chrono::milliseconds(100));
                       return block_of(kBlock, 42);
                     })->bytes[0];
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(decodes.load(), 1);
  for (int value : seen) EXPECT_EQ(value, 42);
  const BlockCacheStats stats = cache.stats();
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.hits + stats.joined, 7);
  EXPECT_GT(stats.joined, 0) << "no thread waited for the running decode";
}

TEST(BlockCache, AFailedDecodeReachesItsWaitersAndIsNotKept) {
  BlockCache cache(std::size_t{1} << 20);
  std::atomic<int> attempts{0};
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      try {
        cache.get({1, 0, 0}, [&]() -> DecodedBlock {
          ++attempts;
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          throw Error("corrupt block");
        });
      } catch (const Error& error) {
        if (std::string(error.what()) == "corrupt block") ++failures;
      }
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 4);
  EXPECT_LT(attempts.load(), 4) << "waiters should share the failing decode";
  EXPECT_EQ(cache.stats().entries, 0u);
  EXPECT_EQ(cache.get({1, 0, 0}, [] { return block_of(10, 1); })->bytes.size(), 10u) << "a later read decodes again";
}

TEST(BlockCache, ErasingASourceDropsOnlyItsBlocks) {
  BlockCache cache(std::size_t{1} << 20);
  for (std::uint32_t i = 0; i < 3; ++i) {
    cache.get({1, 0, i}, [] { return block_of(kBlock, 1); });
    cache.get({2, 0, i}, [] { return block_of(kBlock, 2); });
  }
  cache.erase_source(1);
  EXPECT_EQ(cache.stats().entries, 3u);
  EXPECT_EQ(cache.stats().bytes, 3 * kCharge);
  int decodes = 0;
  cache.get({2, 0, 1}, [&] { ++decodes; return block_of(kBlock, 2); });
  cache.get({1, 0, 1}, [&] { ++decodes; return block_of(kBlock, 1); });
  EXPECT_EQ(decodes, 1);
  EXPECT_NE(BlockCache::new_source_id(), BlockCache::new_source_id());
}

// --- TIFF reads through the cache ---

struct CacheCase {
  std::string name;
  TiffWriteOptions options;
};

TiffWriteOptions make(int64_t w, int64_t h, int channels, int bits, TiffCompression compression, int tile, int rows = 0) {
  TiffWriteOptions o;
  o.width = w;
  o.height = h;
  o.channels = channels;
  o.bits = bits;
  o.compression = compression;
  o.tiled = tile > 0;
  if (tile > 0) o.block_size = tile;
  else o.rows_per_strip = rows;
  return o;
}

std::vector<CacheCase> cache_cases() {
  using C = TiffCompression;
  std::vector<CacheCase> cases;
  cases.push_back({"tiled_deflate_predictor_grey8", make(301, 217, 1, 8, C::deflate, 64)});
  cases.push_back({"tiled_lzw_grey16", make(190, 301, 1, 16, C::lzw, 32)});
  cases.push_back({"tiled_jpeg_ycbcr", make(250, 170, 3, 8, C::jpeg, 64)});
  auto separate = make(201, 131, 3, 16, C::deflate, 48);
  separate.separate_planes = true;
  cases.push_back({"tiled_deflate_rgb16_separate", separate});
  auto white = make(150, 90, 1, 8, C::lzw, 32);
  white.min_is_white = true;
  cases.push_back({"tiled_lzw_grey8_miniswhite", white});
  cases.push_back({"striped_deflate_rgb8", make(203, 111, 3, 8, C::deflate, 0, 7)});
  auto striped_separate = make(177, 93, 3, 8, C::lzw, 0, 10);
  striped_separate.separate_planes = true;
  cases.push_back({"striped_lzw_rgb8_separate", striped_separate});
  cases.push_back({"striped_jpeg_ycbcr", make(180, 100, 3, 8, C::jpeg, 0, 16)});
  auto pyramid = make(517, 301, 3, 8, C::deflate, 64);
  pyramid.levels = 3;
  cases.push_back({"pyramid_subifds_rgb8", pyramid});
  pyramid.levels_as_subifds = false;
  cases.push_back({"pyramid_directories_rgb8", pyramid});
  return cases;
}

void PrintTo(const CacheCase& c, std::ostream* os) { *os << c.name; }

// Overlapping windows over a whole level, the last row and column clamped to the
// edge: every block is read by several windows, and edge blocks are partial.
std::vector<cv::Rect> overlapping_windows(int64_t width, int64_t height, int size, int stride) {
  std::vector<cv::Rect> windows;
  const int w = static_cast<int>(std::min<int64_t>(size, width)), h = static_cast<int>(std::min<int64_t>(size, height));
  for (int64_t y = 0;; y += stride) {
    const int64_t top = std::min<int64_t>(y, height - h);
    for (int64_t x = 0;; x += stride) {
      const int64_t left = std::min<int64_t>(x, width - w);
      windows.emplace_back(static_cast<int>(left), static_cast<int>(top), w, h);
      if (left + w >= width) break;
    }
    if (top + h >= height) break;
  }
  return windows;
}

class TiffCache : public ::testing::TestWithParam<CacheCase> {};

TEST_P(TiffCache, CachedReadsEqualUncachedReads) {
  const CacheCase& c = GetParam();
  ScratchDir dir;
  const std::string path = dir.file(c.name + ".tif");
  write_tiff(path, c.options, [](int level, const cv::Rect& rect, cv::Mat& pixels) {
    testing::fill_pattern(testing::hashed_value, level, rect, pixels);
  });
  const TiffSource plain(path, nullptr);
  // Roomy: everything stays. Tight: two blocks, so the walk evicts all the time.
  const std::size_t block_bytes = static_cast<std::size_t>(plain.info().levels[0].block_width) *
                                  plain.info().levels[0].block_height * plain.info().channels * plain.info().bits / 8;
  BlockCache roomy(std::size_t{64} << 20), tight(2 * (block_bytes + BlockCache::kEntryOverhead));
  const TiffSource through_roomy(path, &roomy), through_tight(path, &tight);
  std::int64_t windows = 0;
  for (int level = 0; level < static_cast<int>(plain.info().levels.size()); ++level) {
    const LevelInfo& L = plain.info().levels[level];
    for (int round = 0; round < 2; ++round) {  // the second round reads from the cache
      for (const cv::Rect& r : overlapping_windows(L.width, L.height, 40, 23)) {
        SCOPED_TRACE(::testing::Message() << "level " << level << " round " << round << " window " << r);
        const cv::Mat expected = plain.read_region(level, r.x, r.y, r.width, r.height);
        ASSERT_EQ(testing::max_abs_diff(through_roomy.read_region(level, r.x, r.y, r.width, r.height), expected), 0);
        ASSERT_EQ(testing::max_abs_diff(through_tight.read_region(level, r.x, r.y, r.width, r.height), expected), 0);
        ++windows;
      }
    }
  }
  // And the uncached reads are right, so "equal" means "correct" (JPEG aside: lossy).
  if (c.options.compression != TiffCompression::jpeg) {
    const cv::Rect all(0, 0, static_cast<int>(plain.info().width()), static_cast<int>(plain.info().height()));
    cv::Mat expected = testing::expected_region(testing::hashed_value, 0, all, plain.info().cv_type());
    if (c.options.min_is_white) cv::bitwise_not(expected, expected);
    EXPECT_EQ(testing::max_abs_diff(plain.read_region(0, 0, 0, all.width, all.height), expected), 0);
  }
  const BlockCacheStats roomy_stats = roomy.stats(), tight_stats = tight.stats();
  EXPECT_GT(roomy_stats.hits, roomy_stats.misses) << "overlapping windows should mostly hit";
  EXPECT_EQ(roomy_stats.evictions, 0);
  EXPECT_LE(tight_stats.bytes, tight_stats.capacity_bytes);
  EXPECT_GT(tight_stats.evictions, 0);
  EXPECT_GT(windows, 0);
}

INSTANTIATE_TEST_SUITE_P(Tiler, TiffCache, ::testing::ValuesIn(cache_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(TiffCacheLayouts, UncompressedYCbCrThroughLibtiffsRgbaReaderIsCachedExactly) {
  ScratchDir dir;
  const std::string path = dir.file("ycbcr.tif");
  const int W = 37, H = 21, rows = 5;
  {
    TIFF* tif = TIFFOpen(path.c_str(), "w");
    ASSERT_NE(tif, nullptr);
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, W);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, H);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 3);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 8);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_YCBCR);
    TIFFSetField(tif, TIFFTAG_YCBCRSUBSAMPLING, 1, 1);
    TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFSetField(tif, TIFFTAG_COMPRESSION, COMPRESSION_NONE);
    TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, rows);
    std::vector<uint8_t> strip(W * rows * 3);
    for (int by = 0; by < H; by += rows) {
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < W; ++c)
          for (int ch = 0; ch < 3; ++ch)  // chroma near neutral keeps RGB in range
            strip[(r * W + c) * 3 + ch] = static_cast<uint8_t>(
                ch == 0 ? testing::hashed_value(0, c, by + r, 0, 8) : 108 + testing::hashed_value(0, c, by + r, ch, 8) % 40);
      ASSERT_GE(TIFFWriteEncodedStrip(tif, TIFFComputeStrip(tif, by, 0), strip.data(), std::min(rows, H - by) * W * 3), 0);
    }
    TIFFClose(tif);
  }
  const TiffSource plain(path, nullptr);
  BlockCache cache(std::size_t{1} << 20);
  const TiffSource cached(path, &cache);
  for (int round = 0; round < 2; ++round)
    for (const cv::Rect& r : overlapping_windows(W, H, 9, 4))
      ASSERT_EQ(testing::max_abs_diff(cached.read_region(0, r.x, r.y, r.width, r.height),
                                      plain.read_region(0, r.x, r.y, r.width, r.height)),
                0)
          << r;
  EXPECT_EQ(cache.stats().misses, (H + rows - 1) / rows) << "each strip decoded once";
}

TEST(TiffCacheConcurrency, ParallelOverlappingReadsAreExactAndDecodeEachBlockOnce) {
  ScratchDir dir;
  const std::string path = dir.file("parallel.tif");
  TiffWriteOptions o = make(640, 480, 3, 8, TiffCompression::deflate, 64);
  o.levels = 2;
  write_tiff(path, o, [](int level, const cv::Rect& rect, cv::Mat& pixels) {
    testing::fill_pattern(testing::hashed_value, level, rect, pixels);
  });
  BlockCache cache(std::size_t{64} << 20);
  auto source = std::make_unique<TiffSource>(path, &cache);
  std::vector<std::vector<cv::Rect>> windows;
  std::size_t blocks = 0;
  for (const LevelInfo& L : source->info().levels) {
    windows.push_back(overlapping_windows(L.width, L.height, 64, 32));
    blocks += static_cast<std::size_t>(((L.width + 63) / 64) * ((L.height + 63) / 64));
  }
  std::vector<std::thread> threads;
  std::vector<int> mismatches(8, 0);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      // Every thread walks every window, from a different starting point.
      for (int level = 0; level < 2; ++level) {
        const auto& list = windows[level];
        for (std::size_t i = 0; i < list.size(); ++i) {
          const cv::Rect& r = list[(i + t * list.size() / 8) % list.size()];
          const cv::Mat got = source->read_region(level, r.x, r.y, r.width, r.height);
          if (testing::max_abs_diff(got, testing::expected_region(testing::hashed_value, level, r, CV_8UC3)) != 0)
            ++mismatches[t];
        }
      }
    });
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
  const BlockCacheStats stats = cache.stats();
  EXPECT_EQ(static_cast<std::size_t>(stats.misses), blocks) << "a block decoded twice (or one never cached)";
  EXPECT_EQ(stats.entries, blocks);
  source.reset();
  EXPECT_EQ(cache.stats().entries, 0u) << "closing the image releases its blocks";
  EXPECT_EQ(cache.stats().bytes, 0u);
}

TEST(TiffCacheBound, AWalkOverAnImageLargerThanTheBudgetStaysWithinIt) {
  ScratchDir dir;
  const std::string path = dir.file("walk.tif");
  TiffWriteOptions o = make(1024, 768, 3, 8, TiffCompression::deflate, 64);  // 192 blocks of 12 KiB
  write_tiff(path, o, [](int level, const cv::Rect& rect, cv::Mat& pixels) {
    testing::fill_pattern(testing::hashed_value, level, rect, pixels);
  });
  const std::size_t budget = 20 * (64 * 64 * 3 + BlockCache::kEntryOverhead);
  BlockCache cache(budget);
  const TiffSource source(path, &cache);
  std::size_t most = 0;
  std::int64_t touches = 0;  // decodes without a cache
  for (const cv::Rect& r : overlapping_windows(1024, 768, 96, 48)) {
    source.read_region(0, r.x, r.y, r.width, r.height);
    most = std::max(most, cache.stats().bytes);
    touches += ((r.x + r.width - 1) / 64 - r.x / 64 + 1) * ((r.y + r.height - 1) / 64 - r.y / 64 + 1);
  }
  const BlockCacheStats stats = cache.stats();
  EXPECT_LE(most, budget);
  EXPECT_GE(most, budget - (64 * 64 * 3 + BlockCache::kEntryOverhead)) << "the budget was not used";
  EXPECT_GT(stats.evictions, 0);
  // A row of windows fills more than the budget, so the next row decodes its blocks
  // again; but along a row each block serves ~3 windows from the cache.
  EXPECT_LT(2 * stats.misses, touches);
}

}  // namespace
}  // namespace bigtrain::tiler
