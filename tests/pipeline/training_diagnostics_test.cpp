// train.diagnostics: the evidence tiles and attention summaries against hand-made
// cases, the objects file read back from make-demo-data, and a real (short) run with
// aggregator.top_tiles that writes one row per image and per optimizer step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "pipeline/config/config.hpp"
#include "pipeline/train/trainer.hpp"
#include "pipeline/train/training_diagnostics.hpp"
#include "tests/support/demo_dataset.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

TEST(TrainingDiagnostics, EvidenceTilesHoldHalfAnObject) {
  ImageTiling plan;
  plan.sampling.downsample = 2.0;  // grid pixels are 2 level-0 pixels
  plan.tiles = {{0, 0, 32, 32}, {32, 0, 32, 32}, {0, 32, 32, 32}};
  // Level 0: tile 0 covers [0, 64)^2, tile 1 [64, 128) x [0, 64), tile 2 [0, 64) x [64, 128).
  const std::vector<bool> evidence = evidence_tiles(plan, {cv::Rect(40, 10, 20, 20), cv::Rect(50, 100, 20, 20)});
  // Box 1 lies inside tile 0; box 2 spans tiles 2 (14 of 20 columns: 70%) and none else.
  EXPECT_EQ(evidence, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(evidence_tiles(plan, {cv::Rect(56, 10, 16, 10)}), (std::vector<bool>{true, true, false}))
      << "a box split evenly holds half of itself in each tile";
  EXPECT_EQ(evidence_tiles(plan, {cv::Rect(58, 10, 16, 10)}), (std::vector<bool>{false, true, false}))
      << "6 of 16 columns are not half";
}

TEST(TrainingDiagnostics, AttentionSummary) {
  const AttentionSummary uniform = summarize_attention({0.25f, 0.25f, 0.25f, 0.25f}, {true, false, false, false});
  EXPECT_NEAR(uniform.entropy, 1.0, 1e-6);
  EXPECT_NEAR(uniform.on_evidence, 0.25, 1e-6);
  EXPECT_NEAR(uniform.max, 0.25, 1e-6);
  const AttentionSummary peaked = summarize_attention({0.0f, 1.0f, 0.0f}, {false, true, false});
  EXPECT_NEAR(peaked.entropy, 0.0, 1e-9);
  EXPECT_NEAR(peaked.on_evidence, 1.0, 1e-9);
  const AttentionSummary half = summarize_attention({0.5f, 0.5f, 0.0f, 0.0f}, {false, false, true, true});
  EXPECT_NEAR(half.entropy, std::log(2.0) / std::log(4.0), 1e-6);
  EXPECT_NEAR(half.on_evidence, 0.0, 1e-9);
}

class DiagnosticsRun : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = testing::fresh_scratch_dir("bigtrain_diagnostics_test");
    testing::make_test_demo_data({.out = (root_ / "data").string(), .size = 192, .classes = {0, 1},
                                  .train = 12, .val = 4, .test = 0, .clutter_lines = 0, .block_size = 64, .seed = 2,
                                  .background = "textured", .strokes = 2, .fragments = 2});
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }
  static fs::path root_;
};
fs::path DiagnosticsRun::root_;

std::vector<std::vector<std::string>> read_csv(const fs::path& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> fields;
    std::stringstream stream(line);
    for (std::string field; std::getline(stream, field, ',');) fields.push_back(field);
    if (!line.empty() && line.back() == ',') fields.emplace_back();
    rows.push_back(fields);
  }
  return rows;
}

TEST_F(DiagnosticsRun, LabelBoxesComeFromTheObjectsFile) {
  const auto boxes = load_label_boxes((root_ / "data" / "train.csv").string());
  ASSERT_EQ(boxes.size(), 12u);
  for (const auto& [path, list] : boxes) {
    EXPECT_TRUE(fs::exists(path)) << path;
    EXPECT_EQ(list.size(), 3u) << "the label's three copies, not the others or fragments";
  }
  EXPECT_TRUE(load_label_boxes((root_ / "nowhere.csv").string()).empty());
}

TEST_F(DiagnosticsRun, WritesARowPerImageAndStepWithTopTiles) {
  const std::string text = fmt::format(R"(data:
  train: {0}/train.csv
  val: {0}/val.csv
  mean: [0.3]
  std: [0.25]
tiler: {{tile: 64, overlap: 32, border: shift}}
model: {{preset: small, in_channels: 1, width: 0.125, stem: {{kernel: 5, stride: 2, maxpool: false}}}}
aggregator: {{kind: attention, hidden: 8, top_tiles: 5}}
train: {{epochs: 1, images_per_step: 2, tile_batch: 8, lr: 0.001, freeze_bn: true, seed: 1, diagnostics: true}}
device: {{type: cpu, threads: 2}}
output: {{dir: {1}}}
)",
                                       (root_ / "data").string(), (root_ / "run").string());
  Trainer trainer(parse_config(text, "diagnostics_test.yaml"), false);
  const TrainOutcome outcome = trainer.run();
  ASSERT_EQ(outcome.epochs_completed, 1);
  const auto images = read_csv(root_ / "run" / "diagnostics.csv");
  ASSERT_EQ(images.size(), 13u) << "a header and one row per training image";
  EXPECT_EQ(images[0][6], "evidence_tiles");
  for (std::size_t r = 1; r < images.size(); ++r) {
    ASSERT_EQ(images[r].size(), 11u);
    EXPECT_EQ(images[r][5], "25") << "a 192-pixel canvas in tiles of 64 every 32: 5 x 5";
    // Tiles of 64 every 32 hold every 28-pixel digit whole somewhere.
    EXPECT_GE(std::stoi(images[r][6]), 1);
    const double entropy = std::stod(images[r][7]), on_evidence = std::stod(images[r][9]);
    EXPECT_GT(entropy, 0.5) << "an untrained attention is close to uniform";
    EXPECT_LE(entropy, 1.0 + 1e-6);
    EXPECT_GE(on_evidence, 0.0);
    EXPECT_LE(on_evidence, 1.0 + 1e-6);
    const int selected_evidence = std::stoi(images[r][10]);
    EXPECT_GE(selected_evidence, 0);
    EXPECT_LE(selected_evidence, std::min(5, std::stoi(images[r][6]))) << "of the 5 selected tiles";
  }
  const auto gradients = read_csv(root_ / "run" / "gradients.csv");
  ASSERT_EQ(gradients.size(), 7u) << "a header and one row per optimizer step (12 images, 2 per step)";
  EXPECT_EQ(gradients[0][2], "grad_conv1.weight");
  for (std::size_t r = 1; r < gradients.size(); ++r) EXPECT_GT(std::stod(gradients[r][2]), 0.0) << "the stem learns";
  EXPECT_EQ(gradients[0].back(), "grad_fc.weight");
}

}  // namespace
}  // namespace bigtrain
