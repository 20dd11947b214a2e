// Inference from checkpoints: what `bigtrain infer` and `bigtrain eval` compute must
// be what the evaluation inside training computed, per-tile scores must be the head
// applied to each tile alone, and bad inputs fail one item at a time.
#include <gtest/gtest.h>
#include <string>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/core/error.hpp"
#include "net/model_spec.hpp"
#include "pipeline/data/demo_data.hpp"
#include "pipeline/engine/checkpoint.hpp"
#include "pipeline/infer/evaluate.hpp"
#include "pipeline/infer/infer.hpp"
#include "pipeline/train/trainer.hpp"
#include "tests/support/demo_dataset.hpp"
#include "tiler/synthetic_image.hpp"
#include "tiler/tiff_writer.hpp"
#include "tiler/tile_reader.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

class InferTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = testing::fresh_scratch_dir("bigtrain_infer_test");
    testing::make_test_demo_data({.out = (root_ / "data").string(), .size = 128, .classes = {0, 1},
                                  .train = 8, .val = 6, .test = 4,
                                  .label_digits = 3, .other_digits = 0, .clutter_lines = 4,
                                  .block_size = 64, .seed = 5});
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  static Config config(const std::string& run, const std::string& aggregator,
                       const std::string& normalize = "dataset") {
    const std::string text = fmt::format(R"(data:
  train: {0}/train.csv
  val: {0}/val.csv
  test: {0}/test.csv
  mean: [0.1]
  std: [0.3]
  normalize: {3}
tiler: {{tile: 64, overlap: 32, border: shift}}
model:
  preset: small
  in_channels: 1
  width: 0.25
  stem: {{kernel: 5, stride: 2, maxpool: false}}
aggregator: {{kind: {2}, hidden: 8}}
train:
  epochs: 1
  images_per_step: 2
  tile_batch: 4
  lr: 0.01
  seed: 3
device: {{type: cpu, threads: 2}}
output: {{dir: {1}}}
)",
                                         (root_ / "data").string(), (root_ / run).string(), aggregator, normalize);
    return parse_config(text, "infer_test.yaml");
  }

  // An untrained checkpoint written as training writes it (for tests that need any
  // weights, not trained ones).
  static std::string untrained_checkpoint(const std::string& name, const std::string& aggregator_kind) {
    const Config c = config(name, aggregator_kind);
    YAML::Node node = YAML::Clone(c.model);
    node["num_classes"] = 2;
    net::Model model(net::model_spec_from_yaml(node, "test"), 21);
    net::AggregatorSpec spec;
    spec.kind = net::parse_aggregator_kind(aggregator_kind);
    spec.hidden = 8;
    auto aggregator = net::make_aggregator(spec, model.encoder().feature_dim(), 22);
    net::Metadata metadata;
    metadata["config"] = config_to_yaml(c);
    metadata["model"] = net::to_yaml_string(model.spec());
    metadata["aggregator"] = nlohmann::json{{"kind", aggregator_kind}, {"hidden", 8}, {"gated", true}}.dump();
    metadata["classes"] = R"(["0", "1"])";
    metadata["normalization"] = R"({"mean": [0.1], "std": [0.3]})";
    metadata["tiler"] = R"({"mode": "tiles", "tile": 64, "overlap": 32, "border": "shift"})";
    const std::string path = (root_ / (name + ".safetensors")).string();
    save_model_checkpoint(path, model, *aggregator, metadata);
    return path;
  }

  static std::vector<Sample> val_samples() {
    Config c = config("unused", "mean");
    c.data.classes = {"0", "1"};
    return load_dataset(c.data, c.train.seed).val;
  }

  static std::vector<ImagePrediction> infer(LoadedCheckpoint& checkpoint, const std::vector<std::string>& paths,
                                            InferenceOptions options = {}) {
    InferenceEngine engine(checkpoint, options);
    std::vector<InferenceItem> items;
    for (const auto& p : paths) items.push_back({p, -1});
    std::vector<ImagePrediction> out;
    engine.run(items, [&](ImagePrediction&& p) { out.push_back(std::move(p)); });
    return out;
  }

  static fs::path root_;
};
fs::path InferTest::root_;

// The probabilities inference gives equal those the evaluation inside training
// computed: the validation metrics the trainer recorded for the checkpoint's epoch
// are recomputed exactly from `InferenceEngine`'s per-image probabilities.
TEST_F(InferTest, EqualsTheEvaluationInsideTraining) {
  Trainer trainer(config("trained", "attention"), false);
  const TrainOutcome outcome = trainer.run();
  const EpochSummary* val = nullptr;
  const EpochSummary* test = nullptr;
  for (const auto& row : outcome.rows) {
    if (row.split == "val") val = &row;
    if (row.split == "test") test = &row;
  }
  ASSERT_NE(val, nullptr);
  ASSERT_NE(test, nullptr);
  const fs::path checkpoints = root_ / "trained" / "checkpoints";
  LoadedCheckpoint checkpoint = load_checkpoint_for_inference((checkpoints / "last.safetensors").string());
  EXPECT_EQ(checkpoint.classes, trainer.dataset().classes);
  EXPECT_EQ(checkpoint.tiler.tile, 64);
  EXPECT_EQ(checkpoint.tiler.overlap, 32);

  for (const auto& [row, samples] : {std::pair{val, &trainer.dataset().val}, std::pair{test, &trainer.dataset().test}}) {
    InferenceEngine engine(checkpoint, {});
    const EvaluationReport report = evaluate_split(engine, checkpoint.classes, *samples, row->split);
    ASSERT_TRUE(report.failures.empty());
    ASSERT_EQ(report.metrics.images, row->metrics.images);
    // The same function on the same batches of the same tiles: the per-image losses
    // and so their mean agree to the last bit; 1e-12 only absorbs the summation.
    EXPECT_NEAR(report.metrics.loss, row->metrics.loss, 1e-12 * std::max(1.0, row->metrics.loss)) << row->split;
    EXPECT_EQ(report.metrics.confusion, row->metrics.confusion) << row->split;
    EXPECT_EQ(report.metrics.auc, row->metrics.auc) << row->split;
    EXPECT_EQ(report.stats.tiles, row->tiles) << row->split;
  }

  // Through the path API (no labels) the probabilities are the same numbers.
  std::vector<std::string> paths;
  for (const Sample& s : trainer.dataset().val) paths.push_back(s.path);
  InferenceEngine engine(checkpoint, {});
  std::vector<InferenceItem> labelled;
  for (const Sample& s : trainer.dataset().val) labelled.push_back({s.path, s.label});
  std::vector<std::vector<float>> with_labels;
  engine.run(labelled, [&](ImagePrediction&& p) { with_labels.push_back(p.probabilities); });
  const auto without = infer(checkpoint, paths);
  ASSERT_EQ(without.size(), with_labels.size());
  for (std::size_t i = 0; i < without.size(); ++i) {
    EXPECT_EQ(without[i].probabilities, with_labels[i]);
    EXPECT_EQ(without[i].index, i);
    EXPECT_EQ(without[i].path, paths[i]);
  }
}

// A run that normalised each tile on its own (tile, highpass) is evaluated the same
// way from its checkpoint: the normalisation travels in the checkpoint's config
// (before, inference fell back to the dataset mean and std and predicted one class).
TEST_F(InferTest, UsesTheRunsTileNormalisation) {
  for (const std::string normalize : {"tile", "highpass"}) {
    SCOPED_TRACE(normalize);
    Trainer trainer(config("trained_" + normalize, "attention", normalize), false);
    const TrainOutcome outcome = trainer.run();
    const EpochSummary* val = nullptr;
    for (const auto& row : outcome.rows)
      if (row.split == "val") val = &row;
    ASSERT_NE(val, nullptr);
    LoadedCheckpoint checkpoint = load_checkpoint_for_inference(
        (root_ / ("trained_" + normalize) / "checkpoints" / "last.safetensors").string());
    EXPECT_EQ(choice_name(checkpoint.normalize), normalize);
    InferenceEngine engine(checkpoint, {});
    const EvaluationReport report = evaluate_split(engine, checkpoint.classes, trainer.dataset().val, "val");
    ASSERT_TRUE(report.failures.empty());
    EXPECT_NEAR(report.metrics.loss, val->metrics.loss, 1e-12 * std::max(1.0, val->metrics.loss));
    EXPECT_EQ(report.metrics.confusion, val->metrics.confusion);
  }
}

// A batch of tiles or another gives the same prediction: inference BatchNorm uses
// running statistics, so batch boundaries must not matter (up to float summation
// order inside the convolution's GEMMs: 1e-5 relative).
TEST_F(InferTest, PredictionDoesNotDependOnTheTileBatch) {
  LoadedCheckpoint checkpoint = load_checkpoint_for_inference(untrained_checkpoint("batch", "attention"));
  std::vector<std::string> paths;
  for (const Sample& s : val_samples()) paths.push_back(s.path);
  InferenceOptions one, seven;
  one.tile_batch = 1;
  seven.tile_batch = 7;
  const auto a = infer(checkpoint, paths, one), b = infer(checkpoint, paths, seven);
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(a[i].ok() && b[i].ok());
    EXPECT_EQ(a[i].tiles, 9);  // 128 px, 64-px tiles every 32 px
    for (std::size_t k = 0; k < 2; ++k) EXPECT_NEAR(a[i].probabilities[k], b[i].probabilities[k], 1e-5);
  }
}

// Mean aggregator: the per-tile score is the head applied to the tile's feature, i.e.
// the plain classifier (encoder + fc) run on that tile alone.
TEST_F(InferTest, TileScoresAreTheClassifierOnEachTile) {
  const std::string path = untrained_checkpoint("tilescores", "mean");
  LoadedCheckpoint checkpoint = load_checkpoint_for_inference(path);
  const std::string image = val_samples().front().path;
  InferenceOptions options;
  options.tile_results = true;
  const auto predictions = infer(checkpoint, {image}, options);
  ASSERT_EQ(predictions.size(), 1u);
  const ImagePrediction& p = predictions[0];
  ASSERT_TRUE(p.ok()) << p.error;
  ASSERT_EQ(p.tile_results.size(), 9u);
  const auto source = tiler::open_image(image);
  const tiler::Sampling sampling = tiler::sampling_at_level(source->info(), 0);
  const Preprocessing preprocessing = checkpoint.preprocessing();
  for (const TileResult& tile : p.tile_results) {
    EXPECT_TRUE(std::isnan(tile.attention));
    Tensor x = Tensor::empty({1, 1, 64, 64});
    preprocess_tile(tiler::read_tile(*source, sampling, tile.rect), preprocessing, 0, x.f32());
    const std::vector<float> logits =
        checkpoint.model->forward(x, net::ForwardContext::inference(Backend::cpu)).to_vector();
    const double z = std::exp(static_cast<double>(logits[0])) + std::exp(static_cast<double>(logits[1]));
    for (std::size_t k = 0; k < 2; ++k)
      // One tile alone vs the same tile inside a 4-tile batch: float summation order.
      EXPECT_NEAR(tile.class_scores[k], std::exp(static_cast<double>(logits[k])) / z, 1e-5);
  }
}

TEST_F(InferTest, AttentionWeightsSumToOne) {
  LoadedCheckpoint checkpoint = load_checkpoint_for_inference(untrained_checkpoint("attention", "attention"));
  InferenceOptions options;
  options.tile_results = true;
  const auto p = infer(checkpoint, {val_samples().front().path}, options);
  ASSERT_TRUE(p[0].ok());
  double sum = 0;
  for (const TileResult& t : p[0].tile_results) {
    EXPECT_GT(t.attention, 0.0f);
    sum += t.attention;
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);  // a float softmax over 9 tiles
}

// A missing file, a file that is no image, a truncated TIFF and a folder: each gets
// its own error naming it, in input order, and the good images around them still
// get their predictions.
TEST_F(InferTest, BadImagesFailOneAtATime) {
  LoadedCheckpoint checkpoint = load_checkpoint_for_inference(untrained_checkpoint("errors", "attention"));
  const std::vector<Sample> samples = val_samples();
  const fs::path bad = root_ / "bad";
  fs::create_directories(bad);
  {
    std::ofstream((bad / "not_an_image.tif").string()) << "this is not a TIFF";
  }
  // A real tiled TIFF cut in the middle of its pixel data: the header opens, the
  // tile reads fail.
  const fs::path whole = bad / "whole.tif";
  tiler::TiffWriteOptions write;
  write.width = 512;
  write.height = 512;
  write.channels = 1;
  write.block_size = 64;
  write.compression = tiler::TiffCompression::none;
  tiler::write_tiff(whole.string(), write, [](int, const cv::Rect& rect, cv::Mat& pixels) {
    for (int y = 0; y < pixels.rows; ++y)
      for (int x = 0; x < pixels.cols; ++x) pixels.at<std::uint8_t>(y, x) = static_cast<std::uint8_t>((rect.x + x) ^ (rect.y + y));
  });
  const fs::path truncated = bad / "truncated.tif";
  {
    std::ifstream in(whole.string(), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(truncated.string(), std::ios::binary) << bytes.substr(0, bytes.size() / 3);
  }
  // Truncation must bite somewhere in the file's tile data, wherever libtiff put the
  // directory: if the directory itself was cut, opening fails instead, also an error.
  const std::vector<std::string> paths = {samples[0].path, (bad / "not_an_image.tif").string(), truncated.string(),
                                          samples[1].path, (bad / "missing.png").string(), samples[2].path};
  const auto predictions = infer(checkpoint, paths);
  ASSERT_EQ(predictions.size(), paths.size());
  for (std::size_t i = 0; i < paths.size(); ++i) {
    EXPECT_EQ(predictions[i].index, i);
    EXPECT_EQ(predictions[i].path, paths[i]);
    const bool good = i == 0 || i == 3 || i == 5;
    EXPECT_EQ(predictions[i].ok(), good) << paths[i] << ": " << predictions[i].error;
    if (!good) EXPECT_NE(predictions[i].error.find(paths[i]), std::string::npos) << predictions[i].error;
  }
  // The good images' results equal those of a run without the bad ones.
  const auto clean = infer(checkpoint, {samples[0].path, samples[1].path, samples[2].path});
  EXPECT_EQ(predictions[0].probabilities, clean[0].probabilities);
  EXPECT_EQ(predictions[3].probabilities, clean[1].probabilities);
  EXPECT_EQ(predictions[5].probabilities, clean[2].probabilities);
}

TEST_F(InferTest, BadCheckpointsAreClearErrors) {
  const fs::path garbage = root_ / "garbage.safetensors";
  { std::ofstream(garbage.string()) << "not a checkpoint at all"; }
  auto message_of = [](const std::string& path) {
    try {
      load_checkpoint_for_inference(path);
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  const std::string missing = (root_ / "missing.safetensors").string();
  EXPECT_NE(message_of(missing).find(missing), std::string::npos);
  const std::string garbage_message = message_of(garbage.string());
  EXPECT_NE(garbage_message.find(garbage.string()), std::string::npos) << garbage_message;
  EXPECT_NE(garbage_message.find("safetensors"), std::string::npos) << garbage_message;

  // Weights without the metadata inference needs: the message names the key.
  const std::string good = untrained_checkpoint("meta", "mean");
  net::SafetensorsFile file = net::read_safetensors(good);
  file.metadata.erase("classes");
  const std::string no_classes = (root_ / "no_classes.safetensors").string();
  net::write_safetensors(no_classes, file);
  EXPECT_NE(message_of(no_classes).find("`classes`"), std::string::npos) << message_of(no_classes);

  // Metadata describing another architecture than the weights hold.
  file = net::read_safetensors(good);
  file.metadata["aggregator"] = R"({"kind": "attention", "hidden": 8})";
  const std::string wrong = (root_ / "wrong_aggregator.safetensors").string();
  net::write_safetensors(wrong, file);
  EXPECT_NE(message_of(wrong).find("aggregator"), std::string::npos) << message_of(wrong);
}

TEST_F(InferTest, FoldersExpandToTheirImagesSorted) {
  const fs::path dir = root_ / "expand";
  fs::create_directories(dir / "sub");
  for (const char* name : {"b.tif", "a.png", "sub/c.TIFF", "notes.txt"}) std::ofstream((dir / name).string()) << "x";
  const auto paths = expand_image_paths({(dir).string(), (root_ / "nothing.tif").string()});
  const std::vector<std::string> expected = {(dir / "a.png").string(), (dir / "b.tif").string(),
                                             (dir / "sub/c.TIFF").string(), (root_ / "nothing.tif").string()};
  EXPECT_EQ(paths, expected);
}

}  // namespace
}  // namespace bigtrain
