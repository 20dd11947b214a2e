// The frozen encoder's kept features (pipeline/engine/feature_cache.hpp): whole or
// nothing within the budget, copies independent of the step's H.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/core/error.hpp"
#include "pipeline/engine/feature_cache.hpp"

namespace bigtrain {
namespace {

Tensor rows(std::int64_t n, float value) {
  std::vector<float> v(static_cast<std::size_t>(n * 4), value);
  return Tensor::from_vector({n, 4}, v);
}

TEST(FeatureCache, CompleteOnceEveryImageIsIn) {
  FeatureCache cache("training images", 3, 1 << 20);
  EXPECT_FALSE(cache.complete());
  cache.store(0, rows(2, 1.0f), nullptr);
  cache.store(2, rows(5, 3.0f), nullptr);
  EXPECT_FALSE(cache.complete());
  EXPECT_THROW(cache.at(1), Error);
  cache.store(1, rows(1, 2.0f), nullptr);
  EXPECT_TRUE(cache.complete());
  EXPECT_EQ(cache.images(), 3u);
  EXPECT_EQ(cache.bytes(), (2 + 1 + 5) * 4 * 4);
  EXPECT_EQ(cache.at(2).features.dim(0), 5);
  EXPECT_EQ(cache.at(1).features.to_vector(), std::vector<float>(4, 2.0f));
  // A second epoch's store replaces, and counts its bytes once.
  cache.store(1, rows(3, 7.0f), nullptr);
  EXPECT_EQ(cache.images(), 3u);
  EXPECT_EQ(cache.bytes(), (2 + 3 + 5) * 4 * 4);
}

TEST(FeatureCache, KeepsACopyNotTheStepsBuffer) {
  FeatureCache cache("validation images", 1, 1 << 20);
  Tensor h = rows(2, 1.0f);
  cache.store(0, h, nullptr);
  h.fill(9.0f);  // the step reuses H for its next image
  EXPECT_EQ(cache.at(0).features.to_vector(), std::vector<float>(8, 1.0f));
}

TEST(FeatureCache, GivesUpWholeWhenTheBudgetIsOutgrown) {
  FeatureCache cache("training images", 3, 2 * 4 * 4 + 4 * 4);  // room for 3 rows of 4 floats
  cache.store(0, rows(2, 1.0f), nullptr);
  cache.store(1, rows(1, 1.0f), nullptr);
  EXPECT_FALSE(cache.abandoned());
  cache.store(2, rows(1, 1.0f), nullptr);  // a fourth row: over
  EXPECT_TRUE(cache.abandoned());
  EXPECT_FALSE(cache.complete());
  EXPECT_EQ(cache.bytes(), 0);
  EXPECT_EQ(cache.images(), 0u);
  cache.store(0, rows(1, 1.0f), nullptr);  // refused from then on
  EXPECT_FALSE(cache.complete());
  EXPECT_EQ(cache.images(), 0u);
  EXPECT_TRUE(FeatureCache("off", 1, 0).abandoned());
}

TEST(FeatureCache, ExpectsOnlyThisProcesssShard) {
  FeatureCache cache("validation images", 4, 1 << 20, 2);
  cache.store(1, rows(1, 1.0f), nullptr);
  cache.store(3, rows(1, 1.0f), nullptr);
  EXPECT_TRUE(cache.complete());
}

}  // namespace
}  // namespace bigtrain
