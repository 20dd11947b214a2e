// A checkpoint's metadata has one writer and one reader: what the trainer writes is
// what inference reads back, field by field, and the tile size is written once.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/core/error.hpp"
#include "net/model_spec.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/engine/checkpoint_metadata.hpp"

namespace bigtrain {
namespace {

// Every inference-relevant key away from its default, so a field the writer drops
// or the reader ignores shows.
const char* kRun = R"(data: {train: /data/train.csv, mean: [0.2, 0.3, 0.4], std: [0.5, 0.6, 0.7], max_value: 4095,
       normalize: highpass, highpass_sigma: 2.5}
tiler: {tile: 96, overlap: 16, border: shift, level: 1, downsample: 2.5, min_foreground: 0.25,
        foreground: bright, background: fixed, threshold: 40}
model: {preset: small, width: 0.5, in_channels: 3}
aggregator: {kind: attention, hidden: 24, gated: false, dropout: 0.25, top_tiles: 5}
train: {tile_batch: 7, label_smoothing: 0.1, precision: bf16, freeze_bn: true}
)";

void expect_same(const CheckpointMetadata& read, const CheckpointMetadata& written) {
  EXPECT_EQ(read.model_spec, written.model_spec);
  EXPECT_EQ(read.aggregator_spec.kind, written.aggregator_spec.kind);
  EXPECT_EQ(read.aggregator_spec.hidden, written.aggregator_spec.hidden);
  EXPECT_EQ(read.aggregator_spec.gated, written.aggregator_spec.gated);
  EXPECT_EQ(read.aggregator_spec.dropout, written.aggregator_spec.dropout);
  EXPECT_EQ(read.top_tiles, written.top_tiles);
  EXPECT_EQ(read.classes, written.classes);
  EXPECT_EQ(read.mean, written.mean);
  EXPECT_EQ(read.std, written.std);
  EXPECT_TRUE(read.tiler == written.tiler) << "tile " << read.tiler.tile << " overlap " << read.tiler.overlap
                                           << " border " << choice_name(read.tiler.border);
  EXPECT_EQ(read.max_value, written.max_value);
  EXPECT_EQ(read.normalize, written.normalize);
  EXPECT_EQ(read.highpass_sigma, written.highpass_sigma);
  EXPECT_EQ(read.tile_batch, written.tile_batch);
  EXPECT_EQ(read.label_smoothing, written.label_smoothing);
  EXPECT_EQ(read.precision, written.precision);
  EXPECT_EQ(read.run_config, written.run_config);
  EXPECT_EQ(read.epoch, written.epoch);
  EXPECT_EQ(read.training_state, written.training_state);
}

net::ModelSpec model_of(const Config& config, std::int64_t classes) {
  YAML::Node node = YAML::Clone(config.model);
  node["num_classes"] = classes;
  return net::model_spec_from_yaml(node, "test");
}

TEST(CheckpointMetadata, ATrainingRunsMetadataReadsBackFieldByField) {
  const Config config = parse_config(kRun, "run.yaml");
  CheckpointMetadata written = checkpoint_metadata_of_run(config, model_of(config, 3), {"a", "b", "c"});
  written.epoch = 4;
  written.training_state = "epoch 4, optimizer step 12";
  EXPECT_EQ(written.tiler.tile, 96);
  EXPECT_EQ(written.precision, "bf16");
  EXPECT_EQ(written.normalize, Normalization::highpass);
  EXPECT_EQ(written.highpass_sigma, 2.5);
  EXPECT_EQ(written.aggregator_spec.kind, net::AggregatorKind::attention);

  const net::Metadata metadata = to_safetensors_metadata(written);
  // The tiling lives in the run config only: no second copy to disagree with it.
  EXPECT_EQ(metadata.count("tiler"), 0u);
  EXPECT_EQ(metadata.count("config"), 1u);
  expect_same(parse_checkpoint_metadata(metadata, "run.safetensors"), written);
}

TEST(CheckpointMetadata, ACheckpointMadeElsewhereCarriesItsTilingAsJson) {
  CheckpointMetadata written;
  written.model_spec = net::model_spec_from_yaml_string("preset: resnet18\nin_channels: 3\nnum_classes: 2\n", "test");
  written.aggregator_spec.kind = net::AggregatorKind::max;
  written.classes = {"benign", "tumour"};
  written.mean = {0.485, 0.456, 0.406};
  written.std = {0.229, 0.224, 0.225};
  written.tiler.tile = 224;
  written.tiler.overlap = 32;
  written.tiler.border = tiler::BorderPolicy::drop;
  written.tiler.min_foreground = 0.5;
  written.tile_batch = 9;
  const net::Metadata metadata = to_safetensors_metadata(written);
  EXPECT_EQ(metadata.count("config"), 0u);
  ASSERT_EQ(metadata.count("tiler"), 1u);
  EXPECT_EQ(nlohmann::json::parse(metadata.at("tiler")).at("tile"), 224);
  expect_same(parse_checkpoint_metadata(metadata, "elsewhere.safetensors"), written);
}

TEST(CheckpointMetadata, OlderCheckpointsTilerJsonWinsOverTheirConfig) {
  const Config config = parse_config(kRun, "run.yaml");
  net::Metadata metadata =
      to_safetensors_metadata(checkpoint_metadata_of_run(config, model_of(config, 2), {"x", "y"}));
  metadata["tiler"] = R"({"tile": 64, "overlap": 8, "border": "pad"})";
  const CheckpointMetadata read = parse_checkpoint_metadata(metadata, "old.safetensors");
  EXPECT_EQ(read.tiler.tile, 64);
  EXPECT_EQ(read.tiler.overlap, 8);
  EXPECT_EQ(read.tiler.border, tiler::BorderPolicy::pad);
  EXPECT_EQ(read.tiler.level, 1);  // the keys `tiler` leaves out come from `config`
  EXPECT_EQ(read.tiler.foreground, Foreground::bright);
}

TEST(CheckpointMetadata, OverridesAreAppliedAndCheckedAsAConfigsTilerSection) {
  const Config config = parse_config(kRun, "run.yaml");
  const TilerConfig base = config.tiler;
  const TilerConfig changed = override_tiler(base, {{"tile", "128", "--tile 128"}, {"border", "pad", "--border pad"}},
                                             "c.safetensors");
  EXPECT_EQ(changed.tile, 128);
  EXPECT_EQ(changed.border, tiler::BorderPolicy::pad);
  EXPECT_EQ(changed.overlap, base.overlap);
  EXPECT_EQ(changed.threshold, base.threshold);
  EXPECT_TRUE(override_tiler(base, {}, "c.safetensors") == base);

  // An overlap the (overridden) tile cannot hold: the message names the flag and the key.
  std::string message;
  try {
    override_tiler(base, {{"overlap", "96", "--overlap 96"}}, "c.safetensors");
  } catch (const Error& error) {
    message = error.what();
  }
  EXPECT_NE(message.find("--overlap 96"), std::string::npos) << message;
  EXPECT_NE(message.find("tiler.overlap"), std::string::npos) << message;
  message.clear();
  try {
    override_tiler(base, {{"border", "wrap", "--border wrap"}}, "c.safetensors");
  } catch (const Error& error) {
    message = error.what();
  }
  EXPECT_NE(message.find("--border wrap"), std::string::npos) << message;
}

}  // namespace
}  // namespace bigtrain
