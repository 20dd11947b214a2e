#pragma once
// What a checkpoint says about the network it holds: everything `bigtrain infer` and
// `bigtrain eval` need to rebuild it and feed it images as training did. One writer
// (to_safetensors_metadata, used by the trainer) and one reader
// (parse_checkpoint_metadata, used by inference); docs/checkpoints.md describes the keys.
//
// A bigtrain checkpoint carries its run's resolved config (`config`), and the tiling,
// data.max_value, data.normalize (and its highpass_sigma), train.tile_batch, label
// smoothing and precision are read from it:
// the tile size is written once. A checkpoint made elsewhere (a torchvision ResNet
// saved with metadata, docs/checkpoints.md) has no `config`; its tiling is the
// `tiler` JSON, which older bigtrain checkpoints also wrote and which wins over
// `config` where both speak.
#include <cstdint>
#include <string>
#include <vector>

#include "net/aggregator.hpp"
#include "net/model_spec.hpp"
#include "net/safetensors.hpp"
#include "pipeline/config/choices.hpp"
#include "pipeline/config/specs.hpp"

namespace bigtrain {

struct CheckpointMetadata {
  net::ModelSpec model_spec;       // `model`: the architecture, with num_classes
  net::AggregatorSpec aggregator_spec;  // `aggregator` (absent: mean)
  std::int64_t top_tiles = 0;      // aggregator.top_tiles of the training run
  std::vector<std::string> classes;  // `classes`: the head's output order
  std::vector<double> mean, std;     // `normalization`, after scaling pixels to [0, 1]
  // data.normalize and data.highpass_sigma of the run (from `config`; a checkpoint made
  // elsewhere: dataset, with `normalization`'s mean and std).
  Normalization normalize = Normalization::dataset;
  double highpass_sigma = 3.0;

  // From `config` (a bigtrain checkpoint) or `tiler` (one made elsewhere).
  TilerConfig tiler;
  std::int64_t max_value = 0;      // data.max_value of the training run (0: each image's own)
  std::int64_t tile_batch = 16;
  double label_smoothing = 0.0;    // of the training run, so eval losses match its own
  std::string precision = "fp32";  // train.precision of the training run

  // The run's resolved config as YAML (config_to_yaml); empty for a checkpoint made
  // elsewhere, which then writes `tiler` instead.
  std::string run_config;
  std::int64_t epoch = -1;      // the last completed epoch (1-based); -1: not written
  std::string training_state;   // `bigtrain.checkpoint`: "epoch 3, optimizer step 120"
};

// Every field of a training run's checkpoint, from its resolved config.
CheckpointMetadata checkpoint_metadata_of_run(const Config& config, const net::ModelSpec& model,
                                              const std::vector<std::string>& classes);

net::Metadata to_safetensors_metadata(const CheckpointMetadata& metadata);

// Throws Error naming `path` and the key on a missing or malformed key (a tiling
// choice no config names among them). The tiling's numbers are not validated here:
// callers apply their overrides first (override_tiler).
CheckpointMetadata parse_checkpoint_metadata(const net::Metadata& metadata, const std::string& path);

}  // namespace bigtrain
