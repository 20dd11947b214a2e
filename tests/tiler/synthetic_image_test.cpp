// The synthetic slide renders the same pixels whichever rects it is asked for: the
// shortcut for rects entirely outside tissue (plain background, no tissue field
// evaluated) must give exactly what the per-pixel shading gives there.
#include <gtest/gtest.h>

#include "tiler/synthetic_image.hpp"
#include "tiler_test_support.hpp"

namespace bigtrain::tiler {
namespace {

// Background is 233..243 in every channel (236/234/240 +- 3 of grain); tissue is darker.
bool all_background(const cv::Mat& rgb8) {
  double low = 0, high = 0;
  cv::minMaxLoc(rgb8.reshape(1), &low, &high);
  return low >= 230;
}

class SyntheticImageTiles : public ::testing::TestWithParam<std::tuple<int, int, int, bool>> {};

TEST_P(SyntheticImageTiles, TilesEqualTheWholeRender) {
  const auto [channels, bits, level, flat] = GetParam();
  // 6 noise cells across: blobs of tissue and wide background.
  SyntheticImage image{2400, 1800, channels, bits, 7};
  if (flat) {  // what measure_infer_rss writes: sparser tissue on a flat background
    image.tissue_cutoff = 0.58;
    image.background_grain = 0.0;
  }
  const int64_t step = int64_t{1} << level;
  const cv::Rect whole(0, 0, static_cast<int>(image.width / step), static_cast<int>(image.height / step));
  cv::Mat reference;
  render_synthetic(image, level, whole, reference);  // has tissue: shaded pixel by pixel
  if (channels == 3 && bits == 8) {
    ASSERT_FALSE(all_background(reference));
  }
  int background_tiles = 0, tissue_tiles = 0;
  const int tile = 48;
  for (int y = 0; y < whole.height; y += tile)
    for (int x = 0; x < whole.width; x += tile) {
      const cv::Rect rect(x, y, std::min(tile, whole.width - x), std::min(tile, whole.height - y));
      cv::Mat pixels;
      render_synthetic(image, level, rect, pixels);
      ASSERT_EQ(testing::max_abs_diff(pixels, reference(rect)), 0.0) << "tile at " << x << "," << y;
      if (channels == 3 && bits == 8) (all_background(pixels) ? background_tiles : tissue_tiles) += 1;
    }
  if (channels == 3 && bits == 8) {
    // Both kinds occur, so both paths were compared.
    EXPECT_GT(background_tiles, 10);
    EXPECT_GT(tissue_tiles, 10);
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, SyntheticImageTiles,
                         ::testing::Values(std::make_tuple(3, 8, 0, false), std::make_tuple(1, 8, 0, false),
                                           std::make_tuple(3, 16, 0, false), std::make_tuple(3, 8, 1, false),
                                           std::make_tuple(3, 8, 0, true), std::make_tuple(1, 8, 0, true),
                                           std::make_tuple(3, 16, 0, true)));

TEST(SyntheticImage, SameSeedSamePixelsOtherSeedOthers) {
  cv::Mat a, b, c;
  render_synthetic({1000, 1000, 3, 8, 1}, 0, cv::Rect(100, 200, 300, 200), a);
  render_synthetic({1000, 1000, 3, 8, 1}, 0, cv::Rect(100, 200, 300, 200), b);
  render_synthetic({1000, 1000, 3, 8, 2}, 0, cv::Rect(100, 200, 300, 200), c);
  EXPECT_EQ(testing::max_abs_diff(a, b), 0.0);
  EXPECT_GT(testing::max_abs_diff(a, c), 0.0);
}

}  // namespace
}  // namespace bigtrain::tiler
