// Background modes on a real generated image: a grey canvas whose brightness drifts
// in a smooth texture (uneven illumination), with a few small dark objects. One
// global cut (Otsu's) splits the texture and keeps a large part of the canvas; the
// local-contrast mode keeps the objects' tiles and few others.
#include <cmath>
#include <set>
#include <utility>

#include <gtest/gtest.h>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "tiler/background.hpp"
#include "tiler/image_source.hpp"
#include "tiler/tile_grid.hpp"
#include "tiler_test_support.hpp"

namespace bigtrain::tiler {
namespace {

using testing::ScratchDir;

constexpr int kSide = 1536, kTile = 64, kRadius = 20;
const std::vector<cv::Point> kObjects = {{200, 300}, {700, 180}, {1210, 1330}, {420, 1100}, {1000, 760}, {1400, 500}};

// Grey 150 +- 40 in two slow waves, Gaussian noise of 4 levels, objects 60 levels
// darker than the canvas around them.
std::string write_textured_canvas(const ScratchDir& dir) {
  cv::Mat canvas(kSide, kSide, CV_32F);
  for (int y = 0; y < kSide; ++y)
    for (int x = 0; x < kSide; ++x)
      canvas.at<float>(y, x) = static_cast<float>(150 + 25 * std::sin(2 * M_PI * x / 900.0) +
                                                  15 * std::cos(2 * M_PI * (x + 2 * y) / 1300.0));
  for (const cv::Point& p : kObjects) {
    cv::Mat disk = cv::Mat::zeros(canvas.size(), CV_8U);
    cv::circle(disk, p, kRadius, 255, cv::FILLED);
    cv::subtract(canvas, 60.0, canvas, disk);
  }
  cv::Mat noise(canvas.size(), CV_32F);
  cv::RNG rng(7);
  rng.fill(noise, cv::RNG::NORMAL, 0.0, 4.0);
  canvas += noise;
  cv::Mat grey;
  canvas.convertTo(grey, CV_8U);
  const std::string path = dir.file("textured.png");
  EXPECT_TRUE(cv::imwrite(path, grey));
  return path;
}

std::vector<bool> kept_tiles(const ImageSource& source, const TileGrid& grid, BackgroundMode mode, double min_fraction) {
  ForegroundOptions options;
  options.mode = mode;
  const ForegroundMask mask = foreground_mask(make_thumbnail(source), options);
  const Sampling sampling = sampling_at_level(source.info(), 0);
  std::vector<bool> kept;
  for (const Tile& t : grid.tiles()) kept.push_back(foreground_fraction(mask, sampling, t.rect) >= min_fraction);
  return kept;
}

TEST(BackgroundModes, LocalContrastKeepsTheObjectsOnTexturedBackgroundWhereOtsuKeepsTheTexture) {
  ScratchDir dir;
  auto source = open_image(write_textured_canvas(dir));
  const TileGrid grid(kSide, kSide, kTile, 0, BorderPolicy::pad);
  ASSERT_EQ(grid.tiles().size(), 576u);
  // A tile holds an object when at least 5% of it is the object's disk.
  std::set<size_t> object_tiles;
  for (size_t i = 0; i < grid.tiles().size(); ++i) {
    cv::Mat disk = cv::Mat::zeros(kTile, kTile, CV_8U);
    for (const cv::Point& p : kObjects) cv::circle(disk, p - grid.tiles()[i].rect.tl(), kRadius, 255, cv::FILLED);
    if (cv::countNonZero(disk) >= 0.05 * kTile * kTile) object_tiles.insert(i);
  }
  ASSERT_GE(object_tiles.size(), kObjects.size());

  const double min_fraction = 0.05;
  const std::vector<bool> otsu = kept_tiles(*source, grid, BackgroundMode::otsu, min_fraction);
  const std::vector<bool> local = kept_tiles(*source, grid, BackgroundMode::local_contrast, min_fraction);
  const auto count = [](const std::vector<bool>& v) { return std::count(v.begin(), v.end(), true); };
  std::size_t local_object_tiles = 0, otsu_object_tiles = 0;
  for (size_t i : object_tiles) {
    local_object_tiles += local[i];
    otsu_object_tiles += otsu[i];
  }
  std::printf("%zu tiles, %zu hold an object; kept: otsu %ld (%zu of the object tiles), local_contrast %ld (%zu)\n",
              grid.tiles().size(), object_tiles.size(), count(otsu), otsu_object_tiles, count(local),
              local_object_tiles);
  EXPECT_GT(count(otsu), 200) << "Otsu should keep a large part of the textured canvas";
  EXPECT_EQ(local_object_tiles, object_tiles.size()) << "local_contrast must keep every object tile";
  EXPECT_LE(count(local), static_cast<long>(object_tiles.size()) + 8) << "local_contrast kept background tiles";
}

TEST(BackgroundModes, NoneKeepsEverythingAndFixedNeedsAThreshold) {
  cv::Mat grey(32, 32, CV_8U, cv::Scalar(200));
  grey(cv::Rect(0, 0, 8, 8)).setTo(20);
  Thumbnail thumb;
  thumb.pixels = grey;
  ForegroundOptions options;
  options.mode = BackgroundMode::none;
  EXPECT_EQ(cv::countNonZero(foreground_mask(thumb, options).mask), 32 * 32);
  options.mode = BackgroundMode::fixed;
  EXPECT_THROW(foreground_mask(thumb, options), std::exception);
  options.threshold = 100;
  const ForegroundMask fixed = foreground_mask(thumb, options);
  EXPECT_EQ(fixed.mode, BackgroundMode::fixed);
  EXPECT_EQ(cv::countNonZero(fixed.mask), 64);
  for (const char* name : {"otsu", "fixed", "local_contrast", "none"})
    EXPECT_STREQ(background_mode_name(*parse_background_mode(name)), name);
  EXPECT_FALSE(parse_background_mode("Otsu").has_value());
}

}  // namespace
}  // namespace bigtrain::tiler
