// Background filtering: streamed thumbnails and foreground fractions per tile.
#include <gtest/gtest.h>
#include <opencv2/imgproc.hpp>

#include "tiler/background.hpp"
#include "tiler/image_source.hpp"
#include "tiler/tile_grid.hpp"
#include "tiler/tiff_writer.hpp"
#include "tiler_test_support.hpp"

namespace bigtrain::tiler {
namespace {

using testing::ScratchDir;

// A bright slide (grey 230 with a little texture) with dark "tissue" where
// `tissue` says, in level-0 pixels.
std::string write_slide(const ScratchDir& dir, int64_t w, int64_t h, const cv::Rect& tissue, TiffWriteOptions o = {}) {
  o.width = w;
  o.height = h;
  const std::string path = dir.file("slide.tif");
  write_tiff(path, o, [&](int level, const cv::Rect& rect, cv::Mat& pixels) {
    const int scale = 1 << level;
    for (int r = 0; r < rect.height; ++r)
      for (int c = 0; c < rect.width; ++c) {
        const cv::Point p((rect.x + c) * scale, (rect.y + r) * scale);
        const int texture = testing::hashed_value(0, p.x, p.y, 0, 8) % 9;
        const int v = (tissue.contains(p) ? 90 : 230) + texture;
        for (int ch = 0; ch < pixels.channels(); ++ch) {
          if (pixels.depth() == CV_8U) pixels.ptr<uint8_t>(r)[c * pixels.channels() + ch] = static_cast<uint8_t>(v);
          else pixels.ptr<uint16_t>(r)[c * pixels.channels() + ch] = static_cast<uint16_t>(v * 257);
        }
      }
  });
  return path;
}

TEST(Background, TilesOverTissueAreKeptAndTheRestSkipped) {
  ScratchDir dir;
  const cv::Rect tissue(256, 128, 512, 256);  // aligned to the 128 grid and to thumbnail pixels
  auto source = open_image(write_slide(dir, 1280, 768, tissue));
  const Thumbnail thumb = make_thumbnail(*source, 160);  // k = 8: 160 x 96
  EXPECT_EQ(thumb.pixels.size(), cv::Size(160, 96));
  const ForegroundMask mask = foreground_mask(thumb);
  // Otsu may put the cut anywhere between the two classes (tissue ~94, slide ~234).
  EXPECT_GE(mask.threshold, 90);
  EXPECT_LT(mask.threshold, 230);
  EXPECT_FALSE(mask.uniform);
  const Sampling sampling = sampling_at_level(source->info(), 0);
  const TileGrid grid(1280, 768, 128, 0, BorderPolicy::pad);
  for (const Tile& t : grid.tiles()) {
    const double expected = static_cast<double>((t.rect & tissue).area()) / t.rect.area();
    EXPECT_DOUBLE_EQ(foreground_fraction(mask, sampling, t.rect), expected) << t.rect;
  }
  // A tile half over the tissue, half off the image's right edge (pad).
  EXPECT_DOUBLE_EQ(foreground_fraction(mask, sampling, cv::Rect(1024, 0, 512, 512)), 0.0);
  EXPECT_DOUBLE_EQ(foreground_fraction(mask, sampling, cv::Rect(512, 0, 512, 512)), 256.0 * 256 / (512 * 512));
}

TEST(Background, FractionsFollowTheGridAtADownsample) {
  ScratchDir dir;
  const cv::Rect tissue(0, 0, 640, 768);  // left half
  auto source = open_image(write_slide(dir, 1280, 768, tissue));
  const ForegroundMask mask = foreground_mask(make_thumbnail(*source, 320));
  const Sampling half = sampling_at_downsample(source->info(), 2.0);  // 640 x 384 grid pixels
  EXPECT_DOUBLE_EQ(foreground_fraction(mask, half, cv::Rect(0, 0, 64, 64)), 1.0);
  EXPECT_DOUBLE_EQ(foreground_fraction(mask, half, cv::Rect(288, 0, 64, 64)), 0.5);
  EXPECT_DOUBLE_EQ(foreground_fraction(mask, half, cv::Rect(576, 320, 64, 64)), 0.0);
}

TEST(Background, StreamedThumbnailEqualsAreaResizeOfTheWholeImage) {
  for (bool tiled : {true, false}) {
    SCOPED_TRACE(tiled ? "tiled" : "striped");
    ScratchDir dir;
    TiffWriteOptions o;
    o.tiled = tiled;
    o.block_size = 96;
    o.rows_per_strip = 10;
    o.bits = 16;
    auto source = open_image(write_slide(dir, 1536, 768, cv::Rect(700, 300, 500, 200), o));
    const Thumbnail thumb = make_thumbnail(*source, 128);  // k = 12
    ASSERT_EQ(thumb.pixels.size(), cv::Size(128, 64));
    ASSERT_EQ(thumb.pixels.type(), CV_8UC3);
    cv::Mat whole = source->read_region(0, 0, 0, 1536, 768), whole8, reference;
    whole.convertTo(whole8, CV_8UC3, 1.0 / 257.0);
    cv::resize(whole8, reference, thumb.pixels.size(), 0, 0, cv::INTER_AREA);
    // Chunks are whole multiples of the 12-pixel cells, so averages are identical.
    EXPECT_EQ(testing::max_abs_diff(thumb.pixels, reference), 0);
  }
}

TEST(Background, ThumbnailComesFromTheCoarsestLevel) {
  ScratchDir dir;
  TiffWriteOptions o;
  o.levels = 3;
  auto source = open_image(write_slide(dir, 1024, 512, cv::Rect(0, 0, 512, 512), o));
  const Thumbnail thumb = make_thumbnail(*source, 1024);  // level 2 (256 x 128) is already small
  EXPECT_EQ(thumb.pixels.size(), cv::Size(256, 128));
  EXPECT_DOUBLE_EQ(thumb.scale_x, 0.25);
}

TEST(Background, FixedThresholdPolarityAndUniformImages) {
  ScratchDir dir;
  auto source = open_image(write_slide(dir, 256, 256, cv::Rect(0, 0, 128, 256)));
  const Thumbnail thumb = make_thumbnail(*source, 64);
  const Sampling sampling = sampling_at_level(source->info(), 0);
  ForegroundOptions bright;
  bright.dark_foreground = false;
  EXPECT_DOUBLE_EQ(foreground_fraction(foreground_mask(thumb, bright), sampling, {0, 0, 256, 256}), 0.5);
  EXPECT_DOUBLE_EQ(foreground_fraction(foreground_mask(thumb, bright), sampling, {128, 0, 128, 128}), 1.0);
  ForegroundOptions fixed;
  fixed.threshold = 50;  // darker than everything here: nothing is foreground
  EXPECT_DOUBLE_EQ(foreground_fraction(foreground_mask(thumb, fixed), sampling, {0, 0, 256, 256}), 0.0);
  fixed.threshold = 240;  // brighter than everything: all foreground
  EXPECT_DOUBLE_EQ(foreground_fraction(foreground_mask(thumb, fixed), sampling, {0, 0, 256, 256}), 1.0);
  Thumbnail flat;
  flat.pixels = cv::Mat(32, 32, CV_8UC1, cv::Scalar(200));
  const ForegroundMask uniform = foreground_mask(flat);
  EXPECT_TRUE(uniform.uniform);
  EXPECT_EQ(cv::countNonZero(uniform.mask), 32 * 32);
}

}  // namespace
}  // namespace bigtrain::tiler
