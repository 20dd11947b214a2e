// train.augmentation.rotate / scale / shift: one similarity transform per tile about
// its centre. Each test places bright dots on a dark tile and measures where the
// transform put them, over many seeds, against the bounds the config sets.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include <opencv2/imgproc.hpp>

#include "pipeline/config/config.hpp"
#include "pipeline/data/preprocess.hpp"

namespace bigtrain {
namespace {

constexpr int kSide = 64;
constexpr double kCentre = (kSide - 1) / 2.0;

Preprocessing raw_pixels(const AugmentationConfig& augmentation) {
  Preprocessing p;
  p.mean = {0.0f};
  p.std = {1.0f};
  p.augment = true;
  p.augmentation = augmentation;
  return p;
}

cv::Mat dots(const std::vector<cv::Point>& at) {
  cv::Mat tile(kSide, kSide, CV_8UC1, cv::Scalar(0));
  for (const cv::Point& p : at) cv::circle(tile, p, 2, cv::Scalar(255), cv::FILLED);
  return tile;
}

std::vector<float> run(const cv::Mat& tile, const Preprocessing& p, std::uint64_t seed) {
  std::vector<float> out(kSide * kSide);
  preprocess_tile(tile, p, seed, out.data());
  return out;
}

// Brightness-weighted centre of the pixels inside a window around `near`.
cv::Point2d centroid(const std::vector<float>& pixels, cv::Point2d near, int radius) {
  double sum = 0, sx = 0, sy = 0;
  for (int y = std::max(0, int(near.y) - radius); y <= std::min(kSide - 1, int(near.y) + radius); ++y)
    for (int x = std::max(0, int(near.x) - radius); x <= std::min(kSide - 1, int(near.x) + radius); ++x) {
      const double v = pixels[y * kSide + x];
      sum += v;
      sx += v * x;
      sy += v * y;
    }
  return sum > 0 ? cv::Point2d(sx / sum, sy / sum) : cv::Point2d(-1, -1);
}

TEST(AffineAugmentation, ShiftStaysWithinItsFractionAndUsesBothDirections) {
  AugmentationConfig a;
  a.shift = 0.2;  // up to 12.8 pixels of 64
  const cv::Mat tile = dots({{32, 32}});
  double lowest = 0, highest = 0;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const std::vector<float> out = run(tile, raw_pixels(a), seed);
    const cv::Point2d c = centroid(out, {32, 32}, 17);
    const double dx = c.x - 32, dy = c.y - 32;
    ASSERT_LE(std::abs(dx), 0.2 * kSide + 0.5) << seed;
    ASSERT_LE(std::abs(dy), 0.2 * kSide + 0.5) << seed;
    lowest = std::min({lowest, dx, dy});
    highest = std::max({highest, dx, dy});
    double ink = 0;
    for (float v : out) ink += v;
    // A translation moves the dot, it does not blur it away (bilinear keeps the sum).
    ASSERT_NEAR(ink, cv::sum(tile)[0] / 255.0, 0.02 * cv::sum(tile)[0] / 255.0) << seed;
  }
  EXPECT_LT(lowest, -0.15 * kSide);
  EXPECT_GT(highest, 0.15 * kSide);
}

TEST(AffineAugmentation, RotationKeepsTheRadiusAndStaysWithinItsAngle) {
  AugmentationConfig a;
  a.rotate = 30.0;
  const cv::Point dot(52, 32);  // 20.5 pixels right of the centre
  const cv::Mat tile = dots({dot});
  double smallest = 0, largest = 0;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const std::vector<float> out = run(tile, raw_pixels(a), seed);
    const cv::Point2d c = centroid(out, {kCentre, kCentre}, 31);
    const double radius = std::hypot(c.x - kCentre, c.y - kCentre);
    ASSERT_NEAR(radius, dot.x - kCentre, 0.6) << seed;
    // Image rows grow downwards: OpenCV's positive angle turns anticlockwise on screen.
    const double degrees = std::atan2(-(c.y - kCentre), c.x - kCentre) * 180.0 / std::numbers::pi;
    ASSERT_LE(std::abs(degrees), 30.0 + 1.5) << seed;
    smallest = std::min(smallest, degrees);
    largest = std::max(largest, degrees);
  }
  EXPECT_LT(smallest, -20.0);
  EXPECT_GT(largest, 20.0);
}

TEST(AffineAugmentation, ScaleChangesTheDistanceBetweenTwoDotsWithinItsRange) {
  AugmentationConfig a;
  a.scale = 0.25;
  const cv::Mat tile = dots({{21, 32}, {42, 32}});
  double smallest = 10, largest = 0;
  for (std::uint64_t seed = 1; seed <= 200; ++seed) {
    const std::vector<float> out = run(tile, raw_pixels(a), seed);
    const double factor =
        (centroid(out, {kCentre + 10.5, 32}, 5).x - centroid(out, {kCentre - 10.5, 32}, 5).x) / 21.0;
    ASSERT_GE(factor, 0.75 - 0.04) << seed;
    ASSERT_LE(factor, 1.25 + 0.04) << seed;
    smallest = std::min(smallest, factor);
    largest = std::max(largest, factor);
  }
  EXPECT_LT(smallest, 0.85);
  EXPECT_GT(largest, 1.15);
}

TEST(AffineAugmentation, APureFunctionOfTheSeedAndOffOutsideTraining) {
  AugmentationConfig a;
  a.rotate = 15;
  a.scale = 0.1;
  a.shift = 0.1;
  const cv::Mat tile = dots({{20, 25}, {40, 44}});
  EXPECT_EQ(run(tile, raw_pixels(a), 7), run(tile, raw_pixels(a), 7));
  EXPECT_NE(run(tile, raw_pixels(a), 7), run(tile, raw_pixels(a), 8));
  Preprocessing evaluation = raw_pixels(a);
  evaluation.augment = false;
  EXPECT_EQ(run(tile, evaluation, 7), run(tile, raw_pixels(AugmentationConfig{}), 7))
      << "evaluation and inference see the tile as it is";
}

// The similarity transform's draws come after the others, so turning it on leaves
// the noise, brightness and contrast a seed draws as they were.
TEST(AffineAugmentation, LeavesTheOtherAugmentationsDrawsAlone) {
  AugmentationConfig base;
  base.brightness = 0.2;
  base.contrast = 0.3;
  const cv::Mat flat(kSide, kSide, CV_8UC1, cv::Scalar(100));
  AugmentationConfig with_shift = base;
  with_shift.shift = 0.3;  // a flat tile shifted with reflected borders is the same flat tile
  const std::vector<float> without = run(flat, raw_pixels(base), 11), with = run(flat, raw_pixels(with_shift), 11);
  for (int i = 0; i < kSide * kSide; ++i) ASSERT_NEAR(with[i], without[i], 1e-6) << i;
  EXPECT_GT(std::abs(without[0] - 100.0f / 255.0f), 1e-3) << "the jitter did change the tile";
}

TEST(AffineAugmentation, ConfigKeysAndTheirRanges) {
  const Config c = parse_config(R"(
data: {train: t.csv}
train: {augmentation: {rotate: 10, scale: 0.1, shift: 0.2}}
)", "augment.yaml");
  EXPECT_DOUBLE_EQ(c.train.augmentation.rotate, 10.0);
  EXPECT_DOUBLE_EQ(c.train.augmentation.scale, 0.1);
  EXPECT_DOUBLE_EQ(c.train.augmentation.shift, 0.2);
  EXPECT_TRUE(c.train.augmentation.affine());
  try {
    (void)parse_config("data: {train: t.csv}\ntrain: {augmentation: {shift: 0.7}}\n", "augment.yaml");
    FAIL() << "a shift past half the tile is accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("train.augmentation.shift"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bigtrain
