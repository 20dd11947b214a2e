#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/error_of.hpp"
#include "kernels/core/error.hpp"
#include "pipeline/config/config.hpp"

namespace bigtrain {
namespace {

// The message of the Error `f` throws; fails the test when it throws nothing.
using testing::error_of;

const char* kMinimal = "data:\n  train: /data/train.csv\n";

TEST(Config, DefaultsFillEverythingNotWritten) {
  Config c = parse_config(kMinimal, "min.yaml");
  EXPECT_EQ(c.data.train, "/data/train.csv");
  EXPECT_EQ(c.tiler.tile, 256);
  EXPECT_EQ(c.aggregator.kind, net::AggregatorKind::attention);
  EXPECT_EQ(c.train.optimizer, net::OptimizerKind::adamw);
  EXPECT_EQ(c.device.type, "auto");
  EXPECT_FALSE(c.model.IsDefined() && !c.model.IsNull());
}

TEST(Config, ReadsEverySection) {
  const char* text = R"(data:
  train: /d/train.csv
  val: /d/val.csv
  classes: [three, five]
  mean: [0.1]
  std: [0.2]
tiler:
  tile: 128
  overlap: 16
  border: shift
  max_tiles_per_image: 32
model:
  encoder: resnet18
  stem: {kernel: 11, stride: 4}
aggregator:
  kind: attention
  hidden: 64
  gated: false
  dropout: 0.25
train:
  epochs: 3
  images_per_step: 4
  tile_batch: 8
  optimizer: sgd
  lr: 0.05
  augmentation: {flips: true, rot90: true, brightness: 0.1, contrast: 0.2, noise: 0.01}
  early_stopping: {patience: 2}
  seed: 18446744073709551615
  freeze_bn: true
  best_metric: val_loss
device: {type: cpu, threads: 2}
output: {dir: runs/x}
)";
  Config c = parse_config(text, "all.yaml");
  EXPECT_EQ(c.data.val, "/d/val.csv");
  EXPECT_EQ(c.data.classes, (std::vector<std::string>{"three", "five"}));
  EXPECT_EQ(c.tiler.tile, 128);
  EXPECT_EQ(c.tiler.overlap, 16);
  EXPECT_EQ(c.tiler.border, tiler::BorderPolicy::shift);
  EXPECT_EQ(c.tiler.max_tiles_per_image, 32);
  EXPECT_EQ(c.model["encoder"].as<std::string>(), "resnet18");
  EXPECT_EQ(c.model["stem"]["stride"].as<int>(), 4);
  EXPECT_EQ(c.aggregator.hidden, 64);
  EXPECT_FALSE(c.aggregator.gated);
  EXPECT_DOUBLE_EQ(c.aggregator.dropout, 0.25);
  EXPECT_EQ(c.train.epochs, 3);
  EXPECT_EQ(c.train.optimizer, net::OptimizerKind::sgd);
  EXPECT_DOUBLE_EQ(c.train.lr, 0.05);
  EXPECT_TRUE(c.train.augmentation.rot90);
  EXPECT_DOUBLE_EQ(c.train.augmentation.contrast, 0.2);
  EXPECT_EQ(c.train.early_stopping.patience, 2);
  EXPECT_EQ(c.train.seed, 18446744073709551615ull);
  EXPECT_TRUE(c.train.freeze_bn);
  EXPECT_EQ(c.device.threads, 2);
  EXPECT_EQ(c.output.dir, "runs/x");
}

TEST(Config, ModelPretrainedIsResolvedBesideTheConfig) {
  const auto dir = std::filesystem::temp_directory_path() / ("pretrained_config_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "configs");
  const auto yaml = dir / "configs" / "run.yaml";
  std::ofstream(yaml) << "data: {train: a.csv}\nmodel: {preset: small, pretrained: ../runs/s/last.safetensors}\n";
  const Config config = load_config(yaml.string());
  std::filesystem::remove_all(dir);
  EXPECT_EQ(config.model["pretrained"].as<std::string>(), (dir / "runs" / "s" / "last.safetensors").string());
  const Config absolute =
      parse_config("data: {train: a.csv}\nmodel: {preset: small, pretrained: /w/x.safetensors}\n", "run.yaml");
  EXPECT_EQ(absolute.model["pretrained"].as<std::string>(), "/w/x.safetensors");
}

TEST(Config, UnknownKeyNamesFileLineAndValidKeys) {
  const std::string message = error_of([] { parse_config("data:\n  train: a.csv\ntrain:\n  epoch: 5\n", "run.yaml"); });
  EXPECT_NE(message.find("run.yaml:4:3"), std::string::npos) << message;
  EXPECT_NE(message.find("train.epoch"), std::string::npos) << message;
  EXPECT_NE(message.find("epochs"), std::string::npos) << message;  // among the valid keys
  EXPECT_NE(message.find("tile_batch"), std::string::npos) << message;
}

TEST(Config, UnknownSectionIsAnError) {
  const std::string message = error_of([] { parse_config("data: {train: a.csv}\ntrainer: {}\n", "run.yaml"); });
  EXPECT_NE(message.find("run.yaml:2:1"), std::string::npos) << message;
  EXPECT_NE(message.find("aggregator"), std::string::npos) << message;
}

TEST(Config, BadChoiceListsTheValidOnes) {
  const std::string message =
      error_of([] { parse_config("data: {train: a.csv}\naggregator:\n  kind: median\n", "agg.yaml"); });
  EXPECT_NE(message.find("agg.yaml:3:3"), std::string::npos) << message;
  EXPECT_NE(message.find("mean | max | attention"), std::string::npos) << message;
  EXPECT_NE(message.find("median"), std::string::npos) << message;
}

TEST(Config, BadTypesAndRangesAreErrors) {
  EXPECT_NE(error_of([] { parse_config("data: {train: a.csv}\ntrain: {epochs: ten}\n", "t.yaml"); })
                .find("must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_config("data: {train: a.csv}\ntrain: {epochs: 2.5}\n", "t.yaml"); })
                .find("must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_config("data: {train: a.csv}\ntrain: {epochs: 0}\n", "t.yaml"); }).find("must be in"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_config("data: {train: a.csv}\ntrain: {freeze_bn: maybe}\n", "t.yaml"); })
                .find("true or false"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_config("data: {train: a.csv}\ntiler: {tile: 64, overlap: 64}\n", "t.yaml"); })
                .find("tiler.overlap"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_config("data: {train: a.csv}\ntrain: [1, 2]\n", "t.yaml"); }).find("mapping"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_config("data: {train: a.csv, mean: [0.5, 0.5], std: [1]}\n", "t.yaml"); })
                .find("data.std"),
            std::string::npos);
}

TEST(Config, MemoryBudgetIsASizeZeroOrAuto) {
  EXPECT_FALSE(parse_config(kMinimal, "t.yaml").train.memory_budget_bytes) << "auto by default";
  EXPECT_EQ(parse_config("data: {train: a.csv}\ntrain: {memory_budget: 0}\n", "t.yaml").train.memory_budget_bytes,
            std::optional<std::size_t>{0});
  EXPECT_EQ(parse_config("data: {train: a.csv}\ntrain: {memory_budget: 2GiB}\n", "t.yaml").train.memory_budget_bytes,
            std::optional<std::size_t>{std::size_t{2} << 30});
  const std::string error =
      error_of([] { parse_config("data: {train: a.csv}\ntrain: {memory_budget: lots}\n", "t.yaml"); });
  EXPECT_NE(error.find("train.memory_budget"), std::string::npos) << error;
  EXPECT_NE(error.find("t.yaml"), std::string::npos) << error;
  EXPECT_NE(error.find("auto"), std::string::npos) << error;
}

// GroupNorm shares nothing between tiles: IPS's pass-2 sub-batches compute what
// pass 1 did without freezing anything, while streaming cannot normalise a tile by
// the whole map's group statistics.
TEST(Config, GroupNormLiftsTheFrozenBatchNormRuleAndCannotStream) {
  const char* ips = "data: {train: a.csv}\naggregator: {kind: attention, top_tiles: 4}\n";
  EXPECT_NE(error_of([&] { parse_config(ips, "t.yaml"); }).find("freeze_bn: true or model.norm: group"),
            std::string::npos);
  EXPECT_EQ(parse_config(std::string(ips) + "model: {preset: small, norm: group}\n", "t.yaml").aggregator.top_tiles, 4);
  // A model section without `norm` is BatchNorm's (and reading it must not throw).
  EXPECT_NE(error_of([&] { parse_config(std::string(ips) + "model: {preset: small}\n", "t.yaml"); })
                .find("freeze_bn: true or model.norm: group"),
            std::string::npos);
  const std::string stream =
      error_of([] {
        parse_config("data: {train: a.csv}\ntiler: {mode: stream}\naggregator: {kind: mean}\n"
                     "train: {freeze_bn: true}\nmodel: {preset: small, norm: group}\n",
                     "t.yaml");
      });
  EXPECT_NE(stream.find("norm: group cannot stream"), std::string::npos) << stream;
}

TEST(Config, MissingTrainDataIsAnError) {
  const std::string message = error_of([] { parse_config("train: {epochs: 2}\n", "empty.yaml"); });
  EXPECT_NE(message.find("data.train"), std::string::npos) << message;
  EXPECT_NE(message.find("required"), std::string::npos) << message;
}

TEST(Config, InvalidYamlNamesTheLine) {
  const std::string message = error_of([] { parse_config("data:\n  train: [a\n", "broken.yaml"); });
  EXPECT_NE(message.find("broken.yaml:"), std::string::npos) << message;
  EXPECT_NE(message.find("not valid YAML"), std::string::npos) << message;
}

TEST(Config, OverridesReplaceAndAdd) {
  Config c = parse_config("data: {train: a.csv}\ntrain: {epochs: 5}\n", "o.yaml",
                          {"train.epochs=7", "train.augmentation.flips=true", "aggregator.kind=max",
                           "data.classes=[a, b]", "model.encoder=resnet34"});
  EXPECT_EQ(c.train.epochs, 7);
  EXPECT_TRUE(c.train.augmentation.flips);
  EXPECT_EQ(c.aggregator.kind, net::AggregatorKind::max);
  EXPECT_EQ(c.data.classes, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.model["encoder"].as<std::string>(), "resnet34");
}

TEST(Config, OverridesAreStrictToo) {
  const std::string unknown = error_of([] { parse_config(kMinimal, "o.yaml", {"train.epoch=3"}); });
  EXPECT_NE(unknown.find("--set train.epoch=3"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("epochs"), std::string::npos) << unknown;
  const std::string bad = error_of([] { parse_config(kMinimal, "o.yaml", {"tiler.tile=big"}); });
  EXPECT_NE(bad.find("--set tiler.tile=big"), std::string::npos) << bad;
  EXPECT_NE(bad.find("must be an integer"), std::string::npos) << bad;
  EXPECT_NE(error_of([] { parse_config(kMinimal, "o.yaml", {"noequals"}); }).find("KEY=VALUE"), std::string::npos);
  EXPECT_NE(error_of([] { parse_config(kMinimal, "o.yaml", {"train.epochs.x=1"}); }).find("--set"),
            std::string::npos);
}

TEST(Config, ResolvedYamlRoundTrips) {
  Config c = parse_config(kMinimal, "r.yaml",
                          {"train.lr=0.1", "tiler.tile=96", "aggregator.gated=false", "model.encoder=resnet18",
                           "train.seed=123456789012345", "data.mean=[0.1, 0.2, 0.3]", "data.std=[1, 2, 3]"});
  const std::string text = config_to_yaml(c);
  Config again = parse_config(text, "resolved.yaml");
  EXPECT_EQ(config_to_yaml(again), text);
  EXPECT_DOUBLE_EQ(again.train.lr, 0.1);
  EXPECT_EQ(again.tiler.tile, 96);
  EXPECT_FALSE(again.aggregator.gated);
  EXPECT_EQ(again.train.seed, 123456789012345ull);
  EXPECT_EQ(again.data.mean, c.data.mean);
  EXPECT_EQ(again.model["encoder"].as<std::string>(), "resnet18");
}

TEST(Config, DataPathsAreRelativeToTheConfigFile) {
  const auto dir = std::filesystem::temp_directory_path() / ("bigtrain_config_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "sub");
  const auto path = (dir / "sub" / "c.yaml").string();
  std::ofstream(path) << "data:\n  train: ../data/train.csv\n  test: /abs/test.csv\n";
  Config c = load_config(path);
  EXPECT_EQ(c.data.train, (dir / "data" / "train.csv").lexically_normal().string());
  EXPECT_EQ(c.data.test, "/abs/test.csv");
  save_config(c, (dir / "resolved.yaml").string());
  Config saved = load_config((dir / "resolved.yaml").string());
  EXPECT_EQ(saved.data.train, c.data.train);
  EXPECT_NE(error_of([&] { load_config((dir / "missing.yaml").string()); }).find("missing.yaml"), std::string::npos);
  std::filesystem::remove_all(dir);
}

// Every config the repository ships is one a user can run: it parses with no
// unknown key or bad value (its data need not exist yet).
TEST(Config, EveryShippedConfigParses) {
  int parsed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(BIGTRAIN_SOURCE_DIR "/configs")) {
    if (entry.path().extension() != ".yaml") continue;
    SCOPED_TRACE(entry.path().string());
    const Config config = load_config(entry.path().string());
    EXPECT_FALSE(config.data.train.empty());
    ++parsed;
  }
  EXPECT_GE(parsed, 6);
}

}  // namespace
}  // namespace bigtrain
