// The kept tiles of an image are filtered once per process: a second plan gets the
// same tiles without decoding the thumbnail again, and any setting the filter
// depends on gives its own entry.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "pipeline/data/foreground_cache.hpp"
#include "pipeline/data/image_tiling.hpp"
#include "tests/support/demo_dataset.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

// Tiles of 64 every 48, the local-contrast filter looking for bright objects: what
// the textured demo canvases need.
TilerConfig bright_objects_on_texture() {
  TilerConfig config;
  config.tile = 64;
  config.overlap = 16;
  config.background = tiler::BackgroundMode::local_contrast;
  config.foreground = Foreground::bright;
  return config;
}

TEST(ForegroundCache, SameTilesAsFilteringAgainAndFilteredOnce) {
  const fs::path dir = testing::fresh_scratch_dir("bigtrain_foreground_cache_test");
  testing::make_test_demo_data({.out = dir.string(), .size = 600, .classes = {1, 2}, .train = 2, .val = 0, .test = 0,
                                .block_size = 128, .seed = 1, .background = "textured", .strokes = 4, .fragments = 4});
  TilerConfig config = bright_objects_on_texture();
  config.min_foreground = 0.01;
  const std::string image = (dir / "train" / "00001.tif").string();

  clear_foreground_cache();
  const ImageTiling first = image_tiling(image, config, false, 0, 0);
  ASSERT_GT(first.background_dropped, 0) << "the test needs a filter that drops tiles";
  ASSERT_FALSE(first.tiles.empty());
  const ImageTiling again = image_tiling(image, config, false, 0, 0);
  EXPECT_EQ(again.tiles, first.tiles);
  EXPECT_EQ(foreground_cache_stats().misses, 1);
  EXPECT_EQ(foreground_cache_stats().hits, 1);

  clear_foreground_cache();
  EXPECT_EQ(image_tiling(image, config, false, 0, 0).tiles, first.tiles) << "filtered afresh: the same tiles";

  // Settings the filter depends on are part of the key.
  config.min_foreground = 0.05;
  const ImageTiling stricter = image_tiling(image, config, false, 0, 0);
  EXPECT_LT(stricter.tiles.size(), first.tiles.size());
  config.min_foreground = 0.01;
  config.overlap = 32;
  const ImageTiling denser = image_tiling(image, config, false, 0, 0);
  EXPECT_GT(denser.grid_tiles, first.grid_tiles);
  EXPECT_EQ(foreground_cache_stats().misses, 3);
  EXPECT_EQ(foreground_cache_stats().hits, 0);

  // Training subsamples after the cache: the subset is drawn from the cached tiles.
  config.overlap = 16;
  config.max_tiles_per_image = 3;
  const ImageTiling subset = image_tiling(image, config, true, 7, 0);
  ASSERT_EQ(subset.tiles.size(), 3u);
  for (const cv::Rect& tile : subset.tiles)
    EXPECT_NE(std::find(first.tiles.begin(), first.tiles.end(), tile), first.tiles.end());
  clear_foreground_cache();
  fs::remove_all(dir);
}

// An image where no tile reaches min_foreground keeps the tiles with the most
// foreground instead of stopping the run; they are a subset of what a laxer
// threshold keeps, led by its most foreground tile.
TEST(ForegroundCache, AnImageNoTileReachesKeepsItsMostForegroundTiles) {
  const fs::path dir = testing::fresh_scratch_dir("bigtrain_foreground_fallback_test");
  testing::make_test_demo_data({.out = dir.string(), .size = 600, .classes = {1, 2}, .train = 1, .val = 0, .test = 0,
                                .block_size = 128, .seed = 3, .background = "textured", .strokes = 4, .fragments = 4});
  TilerConfig config = bright_objects_on_texture();
  const std::string image = (dir / "train" / "00000.tif").string();
  clear_foreground_cache();
  config.min_foreground = 0.001;
  const ImageTiling lax = image_tiling(image, config, false, 0, 0);
  ASSERT_LT(lax.tiles.size(), static_cast<std::size_t>(lax.grid_tiles)) << "the test needs a filter that drops tiles";
  config.min_foreground = 1.0;  // no tile of digits and strokes is all foreground
  const ImageTiling strict = image_tiling(image, config, false, 0, 0);
  ASSERT_FALSE(strict.tiles.empty());
  EXPECT_LT(strict.tiles.size(), lax.tiles.size());
  for (const cv::Rect& tile : strict.tiles)
    EXPECT_NE(std::find(lax.tiles.begin(), lax.tiles.end(), tile), lax.tiles.end());
  EXPECT_EQ(strict.background_dropped, strict.grid_tiles - static_cast<std::int64_t>(strict.tiles.size()));
  clear_foreground_cache();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bigtrain
