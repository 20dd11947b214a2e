// BatchNorm calibration must leave each layer's running statistics equal to the plain
// average of its batch statistics over the calibration tiles (not PyTorch's 0.1-EMA,
// which would keep most of the identity initialisation after a few batches).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "net/batch_norm.hpp"
#include "net/encoder.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/demo_data.hpp"
#include "pipeline/data/image_tiling.hpp"
#include "pipeline/data/preprocess.hpp"
#include "pipeline/engine/bn_calibration.hpp"
#include "tests/support/demo_dataset.hpp"
#include "tiler/tile_reader.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

class BnCalibrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::fresh_scratch_dir("bigtrain_bn_calibration");
    testing::make_test_demo_data({.out = root_.string(), .size = 96, .classes = {0, 1},
                                  .train = 2, .val = 0, .test = 0,
                                  .label_digits = 2, .other_digits = 1, .clutter_lines = 2,
                                  .block_size = 64, .seed = 5});
    // No augmentation: the test re-reads the tiles and must see the same pixels.
    config_ = parse_config(R"(data: {train: x.csv, mean: [0.1], std: [0.3]}
tiler: {tile: 48, overlap: 0, border: shift}
train: {tile_batch: 4, augmentation: {flips: false, rot90: false}}
device: {type: cpu, threads: 2}
)",
                           "bn_calibration_test.yaml");
    for (int i = 0; i < 2; ++i)
      samples_.push_back({(root_ / "train" / fmt::format("{:05}.tif", i)).string(), 0, "test"});
    net::EncoderSpec spec = net::EncoderSpec::preset_spec("small");
    spec.in_channels = 1;
    spec.width = 0.25;
    spec.stem = {5, 2, 2, false};
    encoder_ = std::make_unique<net::Encoder>(spec, 7);
  }
  void TearDown() override { fs::remove_all(root_); }

  // bn1's batch mean and unbiased variance over the tiles [first, first + count) of an
  // image, computed from conv1's output outside the calibration code.
  std::pair<std::vector<double>, std::vector<double>> stem_statistics(const std::string& path, std::int64_t first,
                                                                      std::int64_t count) {
    const ImageTiling plan = image_tiling(path, config_.tiler, true, 0, 0);
    const Preprocessing preprocessing = Preprocessing::from_config(config_, 1, true);
    const int t = plan.tile_size;
    Tensor x = Tensor::empty({count, 1, t, t});
    for (std::int64_t i = 0; i < count; ++i) {
      const cv::Mat pixels = tiler::read_tile(*plan.source, plan.sampling, plan.tiles[first + i]);
      preprocess_tile(pixels, preprocessing, 0, x.f32() + i * t * t);
    }
    Tensor y = encoder_->at(0).forward(x, net::ForwardContext::inference(Backend::cpu));
    const std::int64_t channels = y.dim(1), plane = y.dim(2) * y.dim(3), n = count * plane;
    std::vector<double> mean(channels, 0.0), var(channels, 0.0);
    for (std::int64_t c = 0; c < channels; ++c) {
      for (std::int64_t b = 0; b < count; ++b)
        for (std::int64_t k = 0; k < plane; ++k) mean[c] += y.f32()[(b * channels + c) * plane + k];
      mean[c] /= static_cast<double>(n);
      for (std::int64_t b = 0; b < count; ++b)
        for (std::int64_t k = 0; k < plane; ++k) {
          const double d = y.f32()[(b * channels + c) * plane + k] - mean[c];
          var[c] += d * d;
        }
      var[c] /= static_cast<double>(n - 1);
    }
    return {mean, var};
  }

  fs::path root_;
  Config config_;
  std::vector<Sample> samples_;
  std::unique_ptr<net::Encoder> encoder_;
};

TEST_F(BnCalibrationTest, RunningStatisticsAverageTheBatchStatistics) {
  // 96-px canvases in 48-px tiles without overlap: 4 tiles, one batch of 4 per image.
  const BnCalibration result = calibrate_batch_norm(*encoder_, Backend::cpu, config_, samples_, 2, 123);
  ASSERT_EQ(result.images, 2);
  ASSERT_EQ(result.batches, 2);
  ASSERT_EQ(result.tiles, 8);
  const auto [mean0, var0] = stem_statistics(samples_[0].path, 0, 4);
  const auto [mean1, var1] = stem_statistics(samples_[1].path, 0, 4);
  auto& bn1 = dynamic_cast<net::BatchNorm2d&>(encoder_->at(1));
  const Tensor running_mean = bn1.running_mean().value, running_var = bn1.running_var().value;
  ASSERT_EQ(running_mean.numel(), static_cast<std::int64_t>(mean0.size()));
  for (std::size_t c = 0; c < mean0.size(); ++c) {
    // float32 sums over 4 x 24 x 24 values against double: relative 1e-4 of the scale.
    const double mean_scale = std::abs(mean0[c]) + std::abs(mean1[c]) + std::sqrt(var0[c] + var1[c]) + 1e-6;
    EXPECT_NEAR(running_mean.f32()[c], 0.5 * (mean0[c] + mean1[c]), 1e-4 * mean_scale) << "channel " << c;
    EXPECT_NEAR(running_var.f32()[c], 0.5 * (var0[c] + var1[c]), 1e-4 * (var0[c] + var1[c]) + 1e-7) << "channel " << c;
  }
  // Every later layer moved off the identity initialisation too.
  net::BatchNorm2d* last_bn = nullptr;
  for (std::size_t i = 0; i < encoder_->size(); ++i)
    if (auto* bn = dynamic_cast<net::BatchNorm2d*>(&encoder_->at(i))) last_bn = bn;
  ASSERT_NE(last_bn, &bn1);
  bool moved = false;
  for (std::int64_t c = 0; c < last_bn->channels(); ++c)
    moved = moved || std::abs(last_bn->running_var().value.f32()[c] - 1.0f) > 1e-3f;
  EXPECT_TRUE(moved);
}

TEST_F(BnCalibrationTest, SameSeedSameStatistics) {
  calibrate_batch_norm(*encoder_, Backend::cpu, config_, samples_, 1, 9);
  const std::vector<float> first = dynamic_cast<net::BatchNorm2d&>(encoder_->at(1)).running_mean().value.to_vector();
  calibrate_batch_norm(*encoder_, Backend::cpu, config_, samples_, 1, 9);
  EXPECT_EQ(dynamic_cast<net::BatchNorm2d&>(encoder_->at(1)).running_mean().value.to_vector(), first);
}

}  // namespace
}  // namespace bigtrain
