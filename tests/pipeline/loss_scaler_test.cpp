// The fp16 loss scaler's state machine, step by step against GradScaler's rules.
#include <gtest/gtest.h>

#include "kernels/core/error.hpp"
#include "pipeline/engine/loss_scaler.hpp"

namespace bigtrain {
namespace {

LossScalerOptions fp16(double init, std::int64_t growth_interval) {
  LossScalerOptions options;
  options.enabled = true;
  options.init_scale = init;
  options.growth_interval = growth_interval;
  return options;
}

TEST(LossScaler, DefaultsAreGradScalers) {
  LossScalerOptions options;
  options.enabled = true;
  const LossScaler scaler(options);
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(options.growth_factor, 2.0);
  EXPECT_EQ(options.backoff_factor, 0.5);
  EXPECT_EQ(options.growth_interval, 2000);
}

TEST(LossScaler, NonFiniteGradientsSkipTheStepAndHalveTheScale) {
  LossScaler scaler(fp16(1024.0, 3));
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 512.0f);
  EXPECT_FALSE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 256.0f);
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 256.0f);
}

TEST(LossScaler, GrowsAfterGrowthIntervalFiniteStepsInARow) {
  LossScaler scaler(fp16(8.0, 3));
  EXPECT_TRUE(scaler.update(false));
  EXPECT_TRUE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 8.0f);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  EXPECT_TRUE(scaler.update(false));  // the third: grows, counter restarts
  EXPECT_EQ(scaler.scale(), 16.0f);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  for (int i = 0; i < 3; ++i) scaler.update(false);
  EXPECT_EQ(scaler.scale(), 32.0f);
}

TEST(LossScaler, AnOverflowResetsTheGrowthCounter) {
  LossScaler scaler(fp16(8.0, 3));
  scaler.update(false);
  scaler.update(false);
  EXPECT_FALSE(scaler.update(true));  // would have been the third: backs off instead
  EXPECT_EQ(scaler.scale(), 4.0f);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  scaler.update(false);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 4.0f) << "growth needs growth_interval finite steps after the overflow";
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 8.0f);
}

TEST(LossScaler, DisabledScalesByOneAndAlwaysSteps) {
  LossScaler scaler;
  EXPECT_EQ(scaler.scale(), 1.0f);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 1.0f);
}

TEST(LossScaler, StateRoundTripsThroughACheckpoint) {
  LossScaler scaler(fp16(1024.0, 5));
  scaler.update(true);
  scaler.update(false);
  scaler.update(false);
  LossScaler resumed(fp16(65536.0, 5));
  resumed.restore(scaler.to_json(), "last.training.safetensors");
  EXPECT_EQ(resumed.scale(), 512.0f);
  EXPECT_EQ(resumed.growth_tracker(), 2);
  for (int i = 0; i < 3; ++i) resumed.update(false);
  EXPECT_EQ(resumed.scale(), 1024.0f);
  EXPECT_THROW(resumed.restore("{\"scale\": -1, \"growth_tracker\": 0}", "x"), Error);
  EXPECT_THROW(resumed.restore("not json", "x"), Error);
}

}  // namespace
}  // namespace bigtrain
