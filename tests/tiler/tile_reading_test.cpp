// Reading tiles: padding at the border, pyramid levels and downsample factors.
#include <gtest/gtest.h>
#include <opencv2/imgproc.hpp>

#include "tiler/image_source.hpp"
#include "tiler/tile_grid.hpp"
#include "tiler/tile_reader.hpp"
#include "tiler/tiff_writer.hpp"
#include "tiler_test_support.hpp"

namespace bigtrain::tiler {
namespace {

using testing::ScratchDir;

std::string write_pattern(const ScratchDir& dir, int64_t w, int64_t h, int levels, int channels = 3) {
  TiffWriteOptions o;
  o.width = w;
  o.height = h;
  o.channels = channels;
  o.block_size = 64;
  o.levels = levels;
  const std::string path = dir.file("pattern.tif");
  write_tiff(path, o, [](int level, const cv::Rect& rect, cv::Mat& pixels) { testing::fill_pattern(testing::hashed_value, level, rect, pixels); });
  return path;
}

TEST(TileReading, PadTilesAreFilledOutsideTheImage) {
  ScratchDir dir;
  auto source = open_image(write_pattern(dir, 300, 200, 1));
  const Sampling sampling = sampling_at_level(source->info(), 0);
  const TileGrid grid(sampling.width, sampling.height, 128, 0, BorderPolicy::pad);
  const Tile& corner = grid.tiles().back();
  ASSERT_EQ(corner.rect, cv::Rect(256, 128, 128, 128));
  cv::Mat tile = read_tile(*source, sampling, corner.rect, 7);
  ASSERT_EQ(tile.size(), cv::Size(128, 128));
  const cv::Rect inside(0, 0, 44, 72);
  EXPECT_EQ(testing::max_abs_diff(tile(inside), testing::expected_region(testing::hashed_value, 0, {256, 128, 44, 72}, CV_8UC3)), 0);
  cv::Mat right = tile(cv::Rect(44, 0, 84, 128)), below = tile(cv::Rect(0, 72, 128, 56));
  EXPECT_EQ(cv::countNonZero(right.reshape(1) != 7), 0);
  EXPECT_EQ(cv::countNonZero(below.reshape(1) != 7), 0);
  // Shifted tiles lie inside and equal the stored pixels.
  const TileGrid shifted(sampling.width, sampling.height, 128, 0, BorderPolicy::shift);
  const cv::Rect last = shifted.tiles().back().rect;
  EXPECT_EQ(last, cv::Rect(172, 72, 128, 128));
  EXPECT_EQ(testing::max_abs_diff(read_tile(*source, sampling, last), testing::expected_region(testing::hashed_value, 0, last, CV_8UC3)), 0);
}

TEST(TileReading, DownsampleUsesTheNearestFinerLevel) {
  ScratchDir dir;
  auto source = open_image(write_pattern(dir, 512, 384, 3));
  const ImageInfo& info = source->info();
  const Sampling two = sampling_at_downsample(info, 2.0);
  EXPECT_EQ(two.level, 1);
  EXPECT_FALSE(two.resampled());  // level 1 is exactly half: read as stored
  EXPECT_EQ(testing::max_abs_diff(read_tile(*source, two, {10, 20, 64, 64}),
                                  testing::expected_region(testing::hashed_value, 1, {10, 20, 64, 64}, CV_8UC3)),
            0);
  const Sampling three = sampling_at_downsample(info, 3.0);
  EXPECT_EQ(three.level, 1);  // level 2 (4x) is coarser than asked
  EXPECT_EQ(three.width, 171);
  EXPECT_NEAR(three.scale_x, 256.0 / 171.0, 1e-12);
  EXPECT_EQ(sampling_at_downsample(info, 8.0).level, 2);
  testing::expect_error([&] { sampling_at_downsample(info, 0.5); }, {"at least 1"});
  testing::expect_error([&] { sampling_at_level(info, 3); }, {"level 3 does not exist"});
}

TEST(TileReading, IntegerDownsampleEqualsAreaResizeOfTheWholeImage) {
  ScratchDir dir;
  auto source = open_image(write_pattern(dir, 320, 256, 1));
  const Sampling four = sampling_at_downsample(source->info(), 4.0);
  ASSERT_EQ(four.level, 0);
  ASSERT_EQ(four.width, 80);
  cv::Mat whole = source->read_region(0, 0, 0, 320, 256), reference;
  cv::resize(whole, reference, cv::Size(80, 64), 0, 0, cv::INTER_AREA);
  // Tile-aligned blocks of 4x4 source pixels average identically in both paths.
  const TileGrid grid(80, 64, 16, 0, BorderPolicy::drop);
  for (const Tile& t : grid.tiles())
    EXPECT_EQ(testing::max_abs_diff(read_tile(*source, four, t.rect), reference(t.rect)), 0) << t.rect;
}

}  // namespace
}  // namespace bigtrain::tiler
