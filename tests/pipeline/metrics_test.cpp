#include <gtest/gtest.h>

#include <cmath>

#include "pipeline/engine/metrics.hpp"

namespace bigtrain {
namespace {

TEST(Metrics, HandWorkedThreeClassExample) {
  // truth:     0 0 0 1 1 2     predictions: 0 0 1 1 1 0
  const std::vector<int> labels = {0, 0, 0, 1, 1, 2};
  const std::vector<std::vector<float>> p = {{.8f, .1f, .1f}, {.5f, .4f, .1f}, {.2f, .7f, .1f},
                                             {.1f, .8f, .1f}, {.3f, .6f, .1f}, {.5f, .2f, .3f}};
  const auto m = compute_metrics(labels, p, {1, 2, 3, 4, 5, 6}, 3);
  EXPECT_DOUBLE_EQ(m.loss, 3.5);
  EXPECT_DOUBLE_EQ(m.accuracy, 4.0 / 6.0);
  EXPECT_DOUBLE_EQ(m.recall[0], 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.recall[1], 1.0);
  EXPECT_DOUBLE_EQ(m.recall[2], 0.0);
  EXPECT_DOUBLE_EQ(m.balanced_accuracy, (2.0 / 3.0 + 1.0 + 0.0) / 3.0);
  EXPECT_EQ(m.confusion, (std::vector<std::vector<std::int64_t>>{{2, 1, 0}, {0, 2, 0}, {1, 0, 0}}));
  EXPECT_FALSE(m.auc.has_value());
  EXPECT_EQ(confusion_csv(m, {"a", "b", "c"}), "true\\predicted,a,b,c\na,2,1,0\nb,0,2,0\nc,1,0,0\n");
}

TEST(Metrics, AbsentClassIsLeftOutOfBalancedAccuracy) {
  const auto m = compute_metrics({0, 0}, {{.9f, .1f, 0.f}, {.2f, .8f, 0.f}}, {0, 0}, 3);
  EXPECT_TRUE(std::isnan(m.recall[2]));
  EXPECT_DOUBLE_EQ(m.balanced_accuracy, 0.5);
}

TEST(Metrics, RocAucMatchesPairCountingWithTies) {
  // Positives 0.9, 0.4, 0.4; negatives 0.4, 0.1. 0.9 beats both (2); each 0.4 ties 0.4 (0.5) and beats 0.1 (1): 1.5 each -> 2 + 3 = 5 of 6.
  const auto auc = roc_auc({1, 1, 1, 0, 0}, {0.9, 0.4, 0.4, 0.4, 0.1});
  ASSERT_TRUE(auc.has_value());
  EXPECT_DOUBLE_EQ(*auc, 5.0 / 6.0);
  EXPECT_FALSE(roc_auc({1, 1}, {0.2, 0.3}).has_value());
  const auto m = compute_metrics({0, 1, 1, 0}, {{.7f, .3f}, {.4f, .6f}, {.8f, .2f}, {.9f, .1f}}, {0, 0, 0, 0}, 2);
  ASSERT_TRUE(m.auc.has_value());
  EXPECT_DOUBLE_EQ(*m.auc, 0.75);  // positives 0.6, 0.2 vs negatives 0.3, 0.1: 3 of 4 pairs
}

}  // namespace
}  // namespace bigtrain
