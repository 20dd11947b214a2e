// data.normalize: tile standardises each tile on its own, so a brightness offset or
// a contrast change of the whole tile (an illumination gradient across a scan)
// leaves the network's input unchanged; dataset keeps (x - mean) / std.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "pipeline/common/random.hpp"
#include "pipeline/data/preprocess.hpp"

namespace bigtrain {
namespace {

cv::Mat textured_tile(int size, int offset, double gain, std::uint64_t seed) {
  cv::Mat tile(size, size, CV_8UC1);
  SplitMix64 rng(seed);
  for (int y = 0; y < size; ++y)
    for (int x = 0; x < size; ++x)
      tile.at<std::uint8_t>(y, x) = static_cast<std::uint8_t>(offset + gain * (40.0 + 30.0 * rng.uniform()));
  return tile;
}

std::vector<float> preprocessed(const cv::Mat& tile, const Preprocessing& p) {
  std::vector<float> out(static_cast<std::size_t>(tile.total()) * static_cast<std::size_t>(p.channels));
  preprocess_tile(tile, p, 0, out.data());
  return out;
}

Preprocessing per_tile() {
  Preprocessing p;
  p.mean = {0.5f};
  p.std = {0.25f};
  p.per_tile = true;
  return p;
}

TEST(PerTileNormalization, MeanZeroStdOneAndBlindToBrightnessAndContrast) {
  const std::vector<float> base = preprocessed(textured_tile(32, 10, 1.0, 3), per_tile());
  const double n = static_cast<double>(base.size());
  const double mean = std::accumulate(base.begin(), base.end(), 0.0) / n;
  double squares = 0.0;
  for (float v : base) squares += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, 0.0, 1e-5);
  EXPECT_NEAR(std::sqrt(squares / n), 1.0, 1e-4);

  // The same texture 100 grey levels brighter: the same input to the network.
  const std::vector<float> brighter = preprocessed(textured_tile(32, 110, 1.0, 3), per_tile());
  for (std::size_t i = 0; i < base.size(); ++i) ASSERT_NEAR(brighter[i], base[i], 1e-4) << i;
  // Twice the contrast (integer pixels: equal up to rounding of the doubled levels).
  const std::vector<float> stronger = preprocessed(textured_tile(32, 10, 2.0, 3), per_tile());
  double worst = 0.0;
  for (std::size_t i = 0; i < base.size(); ++i) worst = std::max(worst, std::abs(double{stronger[i]} - base[i]));
  EXPECT_LT(worst, 0.12) << "one grey level of 30 is ~0.1 standard deviations";

  // Dataset normalisation is not blind to brightness: the test can tell them apart.
  Preprocessing dataset = per_tile();
  dataset.per_tile = false;
  EXPECT_NEAR(preprocessed(textured_tile(32, 110, 1.0, 3), dataset)[0] -
                  preprocessed(textured_tile(32, 10, 1.0, 3), dataset)[0],
              100.0 / 255.0 / 0.25, 1e-4);
}

TEST(PerTileNormalization, AFlatTileStaysFlat) {
  const cv::Mat flat(16, 16, CV_8UC1, cv::Scalar(90));
  for (float v : preprocessed(flat, per_tile())) ASSERT_EQ(v, 0.0f);
  // One grey level of difference (std ~0.002 of full scale) is scaled by 1/0.01,
  // not blown up to unit variance.
  cv::Mat almost = flat.clone();
  almost.at<std::uint8_t>(3, 4) = 91;
  const std::vector<float> out = preprocessed(almost, per_tile());
  const float peak = *std::max_element(out.begin(), out.end());
  EXPECT_NEAR(peak, (1.0 - 1.0 / 256.0) / 255.0 / kFlatTileStd, 1e-4);
}

// data.normalize: highpass: a smooth illumination ramp across the tile leaves the
// input of a thin bright stroke nearly as it was, where per-tile standardisation
// alone keeps the ramp (it fills most of the tile's variance).
TEST(HighpassNormalization, RemovesASmoothRampAndKeepsAStroke) {
  auto stroke_on_ramp = [](double ramp) {
    cv::Mat tile(48, 48, CV_8UC1);
    for (int y = 0; y < 48; ++y)
      for (int x = 0; x < 48; ++x) tile.at<std::uint8_t>(y, x) = static_cast<std::uint8_t>(60 + ramp * x);
    for (int y = 10; y < 38; ++y) tile.at<std::uint8_t>(y, 24) = static_cast<std::uint8_t>(tile.at<std::uint8_t>(y, 24) + 80);
    return tile;
  };
  Preprocessing highpass = per_tile();
  highpass.highpass_sigma = 2.0;
  const cv::Mat flat = stroke_on_ramp(0.0), ramped = stroke_on_ramp(2.5);  // 0 -> 117 grey levels across
  auto interior_difference = [](const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0.0;
    for (int y = 8; y < 40; ++y)
      for (int x = 8; x < 40; ++x) worst = std::max(worst, std::abs(double{a[y * 48 + x]} - b[y * 48 + x]));
    return worst;
  };
  const std::vector<float> high_flat = preprocessed(flat, highpass), high_ramped = preprocessed(ramped, highpass);
  EXPECT_LT(interior_difference(high_flat, high_ramped), 0.15);
  EXPECT_GT(high_flat[20 * 48 + 24], 3.0) << "the stroke stands out";
  EXPECT_GT(interior_difference(preprocessed(flat, per_tile()), preprocessed(ramped, per_tile())), 1.0)
      << "without the high pass the ramp changes the input";
}

}  // namespace
}  // namespace bigtrain
