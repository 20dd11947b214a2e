// Issue 9: a run stopped between two optimizer steps (what SIGINT/SIGTERM do, placed
// here exactly with Trainer::stop_after_optimizer_steps) and resumed ends with the
// bits of the uninterrupted run: weights, optimizer state and every deterministic
// metrics.csv column. And the checkpoint is one unit: resume reads only
// last.training.safetensors, repairs a last.safetensors left a checkpoint behind,
// and refuses an old-style pair of different epochs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernels/core/error.hpp"
#include "net/safetensors.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/demo_data.hpp"
#include "pipeline/engine/checkpoint.hpp"
#include "pipeline/train/trainer.hpp"
#include "tests/support/demo_dataset.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

class CheckpointResumeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = testing::fresh_scratch_dir("bigtrain_checkpoint_resume_test");
    testing::make_test_demo_data({.out = (root_ / "data").string(), .size = 96, .classes = {0, 1},
                                  .train = 10, .val = 4, .test = 2,
                                  .other_digits = 0, .clutter_lines = 2,
                                  .block_size = 32, .seed = 5});
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  // 10 images, 3 per step: steps of 3, 3, 3 and 1 image, so a stop can land after a
  // short step too. Batch statistics (no freeze_bn), dropout, flips, noise and tile
  // subsets make every random stream and the BatchNorm buffers part of the check.
  static Config config(const std::string& run) {
    const std::string text = fmt::format(R"(data: {{train: {0}/train.csv, val: {0}/val.csv, test: {0}/test.csv, mean: [0.1], std: [0.3]}}
tiler: {{tile: 48, overlap: 16, border: shift, max_tiles_per_image: 5}}
model: {{preset: small, in_channels: 1, width: 0.25, stem: {{kernel: 5, stride: 2, maxpool: false}}}}
aggregator: {{kind: attention, hidden: 8, dropout: 0.2}}
train:
  epochs: 2
  images_per_step: 3
  tile_batch: 4
  optimizer: adamw
  lr: 0.003
  schedule: cosine
  augmentation: {{flips: true, noise: 0.05}}
  seed: 4
device: {{type: cpu, threads: 2}}
output: {{dir: {1}}}
)",
                                         (root_ / "data").string(), (root_ / run).string());
    return parse_config(text, "checkpoint_resume_test.yaml");
  }

  // The uninterrupted run, once per process (ctest runs each case in its own).
  static void run_whole() {
    if (fs::exists(root_ / "whole" / "checkpoints" / "last.training.safetensors")) return;
    const TrainOutcome whole = run("whole", false);
    ASSERT_FALSE(whole.interrupted);
    ASSERT_EQ(whole.epochs_completed, 2);
  }

  static TrainOutcome run(const std::string& dir, bool resume, std::int64_t stop_after_steps = -1) {
    Trainer trainer(config(dir), resume);
    if (stop_after_steps >= 0) trainer.stop_after_optimizer_steps(stop_after_steps);
    return trainer.run();
  }

  // metrics.csv without the columns that measure time and memory (seconds,
  // images/s, tiles/s, wait fraction, peak bytes, peak RSS).
  static std::string deterministic_metrics(const std::string& dir) {
    std::ifstream in(root_ / dir / "metrics.csv");
    std::string kept, line;
    while (std::getline(in, line)) {
      std::stringstream fields(line);
      std::string field;
      for (int column = 0; std::getline(fields, field, ','); ++column)
        if (column < 8 || column > 13) kept += field + ",";
      kept += "\n";
    }
    return kept;
  }

  static void expect_same_checkpoint(const std::string& a_dir, const std::string& b_dir) {
    for (const char* name : {"last.training.safetensors", "last.safetensors", "best.safetensors"}) {
      const auto a = net::read_safetensors(root_ / a_dir / "checkpoints" / name);
      const auto b = net::read_safetensors(root_ / b_dir / "checkpoints" / name);
      ASSERT_EQ(a.tensors.size(), b.tensors.size()) << name;
      for (const auto& [key, tensor] : a.tensors) {
        ASSERT_TRUE(b.tensors.contains(key)) << name << ": " << key;
        EXPECT_EQ(tensor.bytes, b.tensors.at(key).bytes) << b_dir << "/" << name << ": " << key << " differs";
      }
      EXPECT_EQ(a.metadata.at("bigtrain.checkpoint"), b.metadata.at("bigtrain.checkpoint")) << name;
    }
    EXPECT_EQ(deterministic_metrics(a_dir), deterministic_metrics(b_dir));
  }

  static fs::path root_;
};
fs::path CheckpointResumeTest::root_;

TEST_F(CheckpointResumeTest, StoppedBetweenAnyStepsResumesBitForBit) {
  ASSERT_NO_FATAL_FAILURE(run_whole());
  // Four stops in one run: inside epoch 1 after a full step, after epoch 1's last
  // (short) step but before its validation, after epoch 2's first step (so epoch
  // 1's validation ran on resume), and late in epoch 2. Each invocation resumes the previous one's checkpoint.
  const std::vector<std::pair<std::int64_t, std::string>> stops = {
      {2, "epoch 1, optimizer step 2 of 4"},
      {4, "epoch 1, optimizer step 4 of 4"},
      {5, "epoch 2, optimizer step 1 of 4"},
      {7, "epoch 2, optimizer step 3 of 4"}};
  bool resume = false;
  for (const auto& [steps, where] : stops) {
    const TrainOutcome stopped = run("stopped", resume, steps);
    ASSERT_TRUE(stopped.interrupted) << "no stop after step " << steps;
    EXPECT_EQ(stopped.stop_signal, 0);
    EXPECT_NE(stopped.stopped_at.find(where), std::string::npos) << stopped.stopped_at;
    const auto metadata = net::read_safetensors(root_ / "stopped" / "checkpoints" / "last.training.safetensors").metadata;
    EXPECT_NE(metadata.at("bigtrain.checkpoint").find(where), std::string::npos) << metadata.at("bigtrain.checkpoint");
    EXPECT_TRUE(metadata.contains("unfinished_epoch"));
    resume = true;
  }
  const TrainOutcome rest = run("stopped", true);
  EXPECT_FALSE(rest.interrupted);
  EXPECT_EQ(rest.epochs_completed, 2);
  expect_same_checkpoint("whole", "stopped");
}

TEST_F(CheckpointResumeTest, ResumeReadsOnlyTheTrainingStateAndRepairsTheWeightsFile) {
  ASSERT_NO_FATAL_FAILURE(run_whole());
  // A kill between the training state's rename and the weights file's (the order
  // trainer.cpp writes them in) leaves last.safetensors one checkpoint behind.
  // Built here from real files: epoch 1's weights beside epoch 1's complete state,
  // then epoch 1's weights beside a state stopped inside epoch 2.
  {
    Trainer first(config("behind"), false);
    first.set_epoch_limit(1);
    first.run();
  }
  const fs::path checkpoints = root_ / "behind" / "checkpoints";
  fs::copy_file(checkpoints / "last.safetensors", root_ / "epoch1.safetensors", fs::copy_options::overwrite_existing);
  ASSERT_TRUE(run("behind", true, 6).interrupted);
  fs::copy_file(root_ / "epoch1.safetensors", checkpoints / "last.safetensors", fs::copy_options::overwrite_existing);
  EXPECT_NE(read_checkpoint_metadata((checkpoints / "last.safetensors").string()).at("bigtrain.checkpoint"),
            read_checkpoint_metadata((checkpoints / "last.training.safetensors").string()).at("bigtrain.checkpoint"));
  {
    // Resuming rewrites it at once, before training on.
    Trainer resumed(config("behind"), true);
    EXPECT_EQ(read_checkpoint_metadata((checkpoints / "last.safetensors").string()).at("bigtrain.checkpoint"),
              read_checkpoint_metadata((checkpoints / "last.training.safetensors").string()).at("bigtrain.checkpoint"));
    EXPECT_FALSE(resumed.run().interrupted);
  }
  expect_same_checkpoint("whole", "behind");

  // A missing last.safetensors (the kill came before its first rename) is no obstacle either.
  {
    Trainer first(config("no_weights_file"), false);
    first.set_epoch_limit(1);
    first.run();
  }
  fs::remove(root_ / "no_weights_file" / "checkpoints" / "last.safetensors");
  EXPECT_FALSE(run("no_weights_file", true).interrupted);
  expect_same_checkpoint("whole", "no_weights_file");
}

TEST_F(CheckpointResumeTest, AnOldStylePairOfDifferentEpochsIsRefused) {
  // Before the training state carried the weights, resume paired it with
  // last.safetensors; such a pair of two epochs must not resume.
  {
    Trainer first(config("pair"), false);
    first.set_epoch_limit(1);
    first.run();
  }
  const fs::path training = root_ / "pair" / "checkpoints" / "last.training.safetensors";
  net::SafetensorsFile state = net::read_safetensors(training);
  std::erase_if(state.tensors, [](const auto& entry) { return entry.first.rfind("resume.weights/", 0) == 0; });
  state.metadata["epochs_done"] = "0";
  net::write_safetensors(training, state);
  try {
    Trainer resumed(config("pair"), true);
    FAIL() << "a pair of epochs 1 and 0 resumed";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("last.safetensors"), std::string::npos) << message;
    EXPECT_NE(message.find("last.training.safetensors"), std::string::npos) << message;
    EXPECT_NE(message.find("epoch 1"), std::string::npos) << message;
    EXPECT_NE(message.find("of epoch 0"), std::string::npos) << message;
  }
  // Same epochs: an old-style pair still resumes.
  state.metadata["epochs_done"] = "1";
  net::write_safetensors(training, state);
  EXPECT_NO_THROW(Trainer(config("pair"), true));
}

}  // namespace
}  // namespace bigtrain
