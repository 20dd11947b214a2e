// tiler.resize_cache_mb: a cached resized image gives the network exactly the pixels
// of reading and resizing it again, is read once, and a full cache stops growing.
#include <gtest/gtest.h>

#include <filesystem>

#include "pipeline/data/image_tiling.hpp"
#include "pipeline/data/resize_cache.hpp"
#include "tests/support/demo_dataset.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

cv::Mat pixels_of(const ImageTiling& plan) { return tiler::read_tile(*plan.source, plan.sampling, plan.tiles.at(0)); }

TEST(ResizeCache, SamePixelsAsReadingAgainAndReadOnce) {
  const fs::path dir = testing::fresh_scratch_dir("bigtrain_resize_cache_test");
  testing::make_test_demo_data({.out = dir.string(), .size = 600, .classes = {1, 2}, .train = 3, .val = 0, .test = 0,
                                .block_size = 128, .seed = 1, .background = "textured", .fragments = 3});
  clear_resize_cache();
  TilerConfig config;
  config.mode = TilerMode::resize;
  config.resize_size = 96;
  config.resize_cache_mb = 0;
  const std::string image = (dir / "train" / "00001.tif").string();
  const cv::Mat direct = pixels_of(image_tiling(image, config, true, 0, 0));
  ASSERT_EQ(direct.rows, 96);
  EXPECT_EQ(resize_cache_stats().misses, 0) << "resize_cache_mb 0 never looks";

  config.resize_cache_mb = 1;
  for (int epoch = 0; epoch < 3; ++epoch) {
    const cv::Mat cached = pixels_of(image_tiling(image, config, true, 0, 0));
    ASSERT_EQ(cached.size(), direct.size());
    EXPECT_EQ(cv::countNonZero(cached != direct), 0) << "epoch " << epoch;
  }
  EXPECT_EQ(resize_cache_stats().misses, 1);
  EXPECT_EQ(resize_cache_stats().hits, 2);
  EXPECT_EQ(resize_cache_stats().bytes, 96 * 96);

  // A cache too small for a second image serves it from disk every time.
  config.resize_size = 1100;  // 1100^2 bytes: more than 1 MiB
  const std::string other = (dir / "train" / "00002.tif").string();
  pixels_of(image_tiling(other, config, true, 0, 0));
  pixels_of(image_tiling(other, config, true, 0, 0));
  EXPECT_EQ(resize_cache_stats().images, 1);
  EXPECT_EQ(resize_cache_stats().misses, 3);
  clear_resize_cache();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bigtrain
