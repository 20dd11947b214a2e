// What the rotation and contrastive pretexts share (pipeline/train/pretext_common.hpp):
// the pretrain section's batch, rate and pool fall back to train's, the pretext's
// inputs are normalised as pretrain.normalize says whatever data.normalize is, and
// each epoch visits every image once in a seeded order.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "pipeline/config/config.hpp"
#include "pipeline/train/pretext_common.hpp"
#include "tests/support/error_of.hpp"

namespace bigtrain {
namespace {

Config config_with(const std::string& pretrain, const std::string& data_extra = "") {
  return parse_config("data: {train: a.csv" + data_extra + "}\n"
                      "train: {images_per_step: 4, tile_batch: 16, lr: 0.002}\n"
                      "pretrain: {epochs: 3" + pretrain + "}\n",
                      "pretext.yaml");
}

TEST(PretextPlan, FallsBackToTrainsBatchRateAndPool) {
  const PretextPlan plan = plan_pretext(config_with(""), 10);
  EXPECT_EQ(plan.images, 10);
  EXPECT_EQ(plan.images_per_step, 4);
  EXPECT_EQ(plan.tile_batch, 16);
  EXPECT_DOUBLE_EQ(plan.lr, 0.002);
  EXPECT_EQ(plan.groups_per_epoch, 3) << "10 images in groups of 4";
}

TEST(PretextPlan, TakesThePretrainSectionsOwn) {
  const PretextPlan plan =
      plan_pretext(config_with(", images_per_step: 5, tile_batch: 64, lr: 0.01"), 10);
  EXPECT_EQ(plan.images_per_step, 5);
  EXPECT_EQ(plan.tile_batch, 64);
  EXPECT_DOUBLE_EQ(plan.lr, 0.01);
  EXPECT_EQ(plan.groups_per_epoch, 2);
}

TEST(PretextPlan, NeedsImages) {
  const std::string message = testing::error_of([] { plan_pretext(config_with(""), 0); });
  EXPECT_NE(message.find("no training images"), std::string::npos) << message;
}

TEST(PretextPreprocessing, NormalisesAsPretrainSaysAndTrainingAsDataSays) {
  const Config inherits = config_with("", ", normalize: tile");
  EXPECT_EQ(inherits.pretrain.normalize, Normalization::tile) << "absent: data.normalize";
  const Config split = config_with(", normalize: highpass", ", normalize: tile, highpass_sigma: 5");
  EXPECT_EQ(split.data.normalize, Normalization::tile);
  const Preprocessing pretext = pretext_preprocessing(split, 1);
  EXPECT_TRUE(pretext.per_tile);
  EXPECT_DOUBLE_EQ(pretext.highpass_sigma, 5.0);
  EXPECT_TRUE(pretext.augment);
  const Preprocessing training = Preprocessing::from_config(split, 1, true);
  EXPECT_DOUBLE_EQ(training.highpass_sigma, 0.0) << "training keeps data.normalize: tile";
  const Preprocessing dataset = pretext_preprocessing(config_with(", normalize: dataset", ", normalize: highpass"), 1);
  EXPECT_FALSE(dataset.per_tile);
  EXPECT_DOUBLE_EQ(dataset.highpass_sigma, 0.0);
}

TEST(PretextPreprocessing, NamesTheChoicesOnABadOne) {
  const std::string message = testing::error_of([] { config_with(", normalize: sobel"); });
  EXPECT_NE(message.find("pretrain.normalize"), std::string::npos) << message;
  EXPECT_NE(message.find("highpass"), std::string::npos) << message;
}

TEST(PretextEpochJobs, VisitEveryImageOnceInASeededOrder) {
  const std::vector<StreamJob> a = pretext_epoch_jobs(50, 7), b = pretext_epoch_jobs(50, 7),
                               c = pretext_epoch_jobs(50, 8);
  std::vector<std::size_t> images, again, other;
  for (const StreamJob& j : a) images.push_back(j.image);
  for (const StreamJob& j : b) again.push_back(j.image);
  for (const StreamJob& j : c) other.push_back(j.image);
  EXPECT_EQ(images, again);
  EXPECT_NE(images, other);
  std::vector<std::size_t> sorted = images, expected(50);
  std::sort(sorted.begin(), sorted.end());
  std::iota(expected.begin(), expected.end(), std::size_t{0});
  EXPECT_EQ(sorted, expected);
  std::vector<std::size_t> identity(50);
  std::iota(identity.begin(), identity.end(), std::size_t{0});
  EXPECT_NE(images, identity) << "shuffled";
}

}  // namespace
}  // namespace bigtrain
