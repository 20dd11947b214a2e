// pretrain (rotation prediction): the quarter turn against OpenCV's, and the pretext
// learning what only upright shapes reveal, deterministically.
#include <gtest/gtest.h>


#include <fmt/format.h>
#include <opencv2/core.hpp>

#include "net/model.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/dataset.hpp"
#include "pipeline/train/pretext.hpp"
#include "tests/support/demo_dataset.hpp"
#include "tests/support/error_of.hpp"
#include "tests/support/op_check.hpp"
#include "tests/support/pretext_suite.hpp"

namespace bigtrain {
namespace {

TEST(Pretext, QuarterTurnIsOpenCvsCounterClockwiseRotation) {
  const std::int64_t channels = 2, size = 5;
  const Tensor tile = testing::random_tensor({channels, size, size}, 17);
  for (int turns = 0; turns <= 4; ++turns) {
    Tensor turned = tile.clone();
    rotate_tile_quarter_turns(turned.data<float>(), channels, size, turns);
    for (std::int64_t c = 0; c < channels; ++c) {
      cv::Mat expected(static_cast<int>(size), static_cast<int>(size), CV_32F,
                       tile.data<float>() + c * size * size);
      expected = expected.clone();
      for (int t = 0; t < turns % 4; ++t) cv::rotate(expected, expected, cv::ROTATE_90_COUNTERCLOCKWISE);
      for (std::int64_t y = 0; y < size; ++y)
        for (std::int64_t x = 0; x < size; ++x)
          ASSERT_EQ(turned.data<float>()[(c * size + y) * size + x],
                    expected.at<float>(static_cast<int>(y), static_cast<int>(x)))
              << turns << " turns, channel " << c << " (" << y << ", " << x << ")";
    }
  }
}

class PretextTest : public testing::PretextSuite {
 protected:
  static void SetUpTestSuite() { make_set("bigtrain_pretext_test", 48); }

  static Config config(int epochs) {
    return pretext_config("{images_per_step: 2, tile_batch: 32, lr: 0.003, weight_decay: 0, warmup_steps: 0}",
                          fmt::format("{{epochs: {}}}", epochs), "pretext.yaml");
  }

  static std::vector<PretextEpoch> pretrain(const Config& c) {
    const auto model = four_class_model(c);
    return pretrain_by_rotation(c, load_dataset(c.data, 0).train, model->encoder(), Backend::cpu, 11,
                                [] { return false; });
  }
};

TEST_F(PretextTest, LearnsTheTurnOfUprightDigitsDeterministically) {
  const Config c = config(6);
  const auto history = pretrain(c);
  ASSERT_EQ(history.size(), 6u);
  std::string curve;
  for (const auto& e : history) {
    EXPECT_EQ(e.tiles, 48 * 9) << "every tile of every image, each epoch";
    curve += fmt::format(" {:.3f}/{:.3f}", e.loss, e.tile_accuracy);
  }
  SCOPED_TRACE("loss/accuracy by epoch:" + curve);
  // Chance is 0.25 and ln 4; digits, unlike the black background, show their turn.
  EXPECT_NEAR(history.front().tile_accuracy, 0.25, 0.12);
  EXPECT_GT(history.back().tile_accuracy, 0.45);
  EXPECT_LT(history.back().loss, history.front().loss - 0.1);
  const auto again = pretrain(c);
  for (std::size_t i = 0; i < history.size(); ++i) {
    EXPECT_EQ(again[i].loss, history[i].loss) << "epoch " << i + 1;
    EXPECT_EQ(again[i].tile_accuracy, history[i].tile_accuracy);
  }
  const std::string csv = pretext_csv(history);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 7) << csv;
}

TEST(PretextConfig, StreamModeHasNoTilesToTurn) {
  const std::string message = testing::error_of([] {
    parse_config("data: {train: a.csv}\ntiler: {mode: stream}\ntrain: {freeze_bn: true}\npretrain: {epochs: 2}\n",
                 "p.yaml");
  });
  EXPECT_NE(message.find("pretrain"), std::string::npos) << message;
  EXPECT_NE(message.find("stream"), std::string::npos) << message;
}

}  // namespace
}  // namespace bigtrain
