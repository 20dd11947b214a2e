// pretrain.method: contrastive (SimCLR): NT-Xent against its definition and central
// differences, the views' augmentation, and pretraining that learns to find a
// tile's twin, deterministically.
#include <gtest/gtest.h>

#include <cmath>

#include <fmt/format.h>

#include "net/model.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/dataset.hpp"
#include "pipeline/train/contrastive.hpp"
#include "tests/support/demo_dataset.hpp"
#include "tests/support/error_of.hpp"
#include "tests/support/op_check.hpp"
#include "tests/support/pretext_suite.hpp"

namespace bigtrain {
namespace {

Tensor host(const std::vector<float>& values, std::int64_t rows, std::int64_t cols) {
  return Tensor::from_vector({rows, cols}, values);
}

// Views 0 and 2 point one way, 1 and 3 another, orthogonal: each view's twin is
// its most similar, and the loss is log(2 + e^(1/t)) - 1/t for every view.
TEST(NtXent, MatchesItsDefinitionOnOrthogonalPairs) {
  const double t = 0.5;
  const NtXentResult twins = nt_xent(host({2, 0, 0, 3, 1, 0, 0, 0.5f}, 4, 2), t, nullptr);
  EXPECT_NEAR(twins.loss, std::log(2.0 + std::exp(1.0 / t)) - 1.0 / t, 1e-9);
  EXPECT_DOUBLE_EQ(twins.accuracy, 1.0);
  // Rows 2 and 3 swapped: every view's twin is now orthogonal to it.
  const NtXentResult strangers = nt_xent(host({2, 0, 0, 3, 0, 0.5f, 1, 0}, 4, 2), t, nullptr);
  EXPECT_NEAR(strangers.loss, std::log(2.0 + std::exp(1.0 / t)), 1e-9);
  EXPECT_DOUBLE_EQ(strangers.accuracy, 0.0);
}

TEST(NtXent, GradientEqualsCentralDifferencesAndIgnoresLength) {
  const std::int64_t rows = 8, dim = 5;
  const double t = 0.3;
  Tensor h = testing::random_tensor({rows, dim}, 17);
  Tensor grad = Tensor::empty({rows, dim});
  const double loss = nt_xent(h, t, &grad).loss;
  float* value = h.data<float>();
  for (std::int64_t k = 0; k < rows * dim; ++k) {
    const float saved = value[k], step = 1e-3f;
    value[k] = saved + step;
    const double up = nt_xent(h, t, nullptr).loss;
    value[k] = saved - step;
    const double down = nt_xent(h, t, nullptr).loss;
    value[k] = saved;
    const double central = (up - down) / (2.0 * step);
    EXPECT_NEAR(grad.data<float>()[k], central, 2e-4 + 1e-2 * std::abs(central)) << "element " << k;
  }
  // Only directions count: a row's gradient is orthogonal to the row, and scaling
  // rows leaves the loss as it was.
  for (std::int64_t i = 0; i < rows; ++i) {
    double along = 0.0;
    for (std::int64_t k = 0; k < dim; ++k) along += static_cast<double>(value[i * dim + k]) * grad.data<float>()[i * dim + k];
    EXPECT_NEAR(along, 0.0, 1e-6) << "row " << i;
  }
  Tensor scaled = h.clone();
  for (std::int64_t k = 0; k < rows * dim; ++k) scaled.data<float>()[k] *= static_cast<float>(1 + k / dim);
  EXPECT_NEAR(nt_xent(scaled, t, nullptr).loss, loss, 1e-6);
}

TEST(NtXent, RejectsAnOddNumberOfViews) {
  const std::string message = testing::error_of([] { nt_xent(Tensor::zeros({3, 2}), 0.5, nullptr); });
  EXPECT_NE(message.find("twins"), std::string::npos) << message;
}

// A constant tile's view is the constant relit plus noise of 0.1 (whatever the
// crop); a seed gives its own views, the same each time.
TEST(ContrastiveView, RelightsCropsAndAddsNoiseDeterministically) {
  const std::int64_t size = 32;
  std::vector<float> flat(static_cast<std::size_t>(size * size), 0.5f), view(flat.size());
  SplitMix64 rng(3);
  contrastive_view(flat.data(), 1, size, rng, view.data());
  double mean = 0.0, square = 0.0;
  for (float v : view) mean += v;
  mean /= static_cast<double>(view.size());
  for (float v : view) square += (v - mean) * (v - mean);
  EXPECT_GT(mean, 0.5 * 0.6 - 0.4 - 0.02);
  EXPECT_LT(mean, 0.5 * 1.4 + 0.4 + 0.02);
  EXPECT_NEAR(std::sqrt(square / static_cast<double>(view.size())), 0.1, 0.01);

  Tensor tile = testing::random_tensor({2, size, size}, 9);
  std::vector<float> a(static_cast<std::size_t>(2 * size * size)), b(a.size()), c(a.size());
  SplitMix64 first(5), again(5), other(6);
  contrastive_view(tile.data<float>(), 2, size, first, a.data());
  contrastive_view(tile.data<float>(), 2, size, again, b.data());
  contrastive_view(tile.data<float>(), 2, size, other, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

class ContrastiveTest : public testing::PretextSuite {
 protected:
  static void SetUpTestSuite() { make_set("bigtrain_contrastive_test", 32); }

  static Config config(int epochs) {
    return pretext_config("{images_per_step: 8, tile_batch: 16, lr: 0.003, weight_decay: 0, warmup_steps: 0}",
                          fmt::format("{{epochs: {}, method: contrastive, temperature: 0.2}}", epochs),
                          "contrastive.yaml");
  }

  static std::vector<PretextEpoch> pretrain(const Config& c) {
    const auto model = four_class_model(c);
    return pretrain_by_contrast(c, load_dataset(c.data, 0).train, model->encoder(), Backend::cpu, 11,
                                [] { return false; });
  }
};

TEST_F(ContrastiveTest, LearnsToFindEachTilesTwinDeterministically) {
  const Config c = config(4);
  const auto history = pretrain(c);
  ASSERT_EQ(history.size(), 4u);
  std::string curve;
  for (const auto& e : history) {
    EXPECT_EQ(e.tiles, 32 * 9) << "every tile of every image, each epoch";
    curve += fmt::format(" {:.3f}/{:.3f}", e.loss, e.tile_accuracy);
  }
  SCOPED_TRACE("loss/twin accuracy by epoch:" + curve);
  // Chance: 1 of the 31 other views of a batch of 16 tiles.
  EXPECT_GT(history.back().tile_accuracy, 3.0 / 31.0);
  EXPECT_GT(history.back().tile_accuracy, history.front().tile_accuracy);
  EXPECT_LT(history.back().loss, history.front().loss - 0.05);
  const auto again = pretrain(c);
  for (std::size_t i = 0; i < history.size(); ++i) {
    EXPECT_EQ(again[i].loss, history[i].loss) << "epoch " << i + 1;
    EXPECT_EQ(again[i].tile_accuracy, history[i].tile_accuracy);
  }
}

TEST_F(ContrastiveTest, ItsBatchIsPretrainsTileBatchWhenGiven) {
  Config c = config(1);
  c.train.tile_batch = 1;  // the instance vote may train a tile at a time; SimCLR needs negatives
  const std::string message = testing::error_of([&] { pretrain(c); });
  EXPECT_NE(message.find("pretrain.tile_batch"), std::string::npos) << message;
  EXPECT_NE(message.find("at least 2"), std::string::npos) << message;
  c.pretrain.tile_batch = 16;
  c.pretrain.epochs = 1;
  const auto history = pretrain(c);
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(history[0].tiles, 32 * 9);
  EXPECT_GT(history[0].tile_accuracy, 0.0);
}

TEST(ContrastiveConfig, NamesTheMethodsOnABadOne) {
  const std::string message = testing::error_of([] {
    parse_config("data: {train: a.csv}\npretrain: {epochs: 2, method: simclr}\n", "p.yaml");
  });
  EXPECT_NE(message.find("method"), std::string::npos) << message;
  EXPECT_NE(message.find("contrastive"), std::string::npos) << message;
  const Config c = parse_config("data: {train: a.csv}\npretrain: {epochs: 2, method: contrastive}\n", "p.yaml");
  EXPECT_EQ(c.pretrain.method, PretextMethod::contrastive);
  EXPECT_DOUBLE_EQ(c.pretrain.temperature, 0.2);
}

}  // namespace
}  // namespace bigtrain
