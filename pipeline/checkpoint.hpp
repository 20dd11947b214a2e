#pragma once
// Checkpoints of a run. <name>.safetensors holds the model's state_dict under
// torchvision's names (conv1.weight, layer1.0.bn1.running_mean, fc.weight, ...) plus
// the aggregator's tensors under `aggregator.*`, and metadata (all strings, as the
// format requires):
//   bigtrain.format   "1"
//   config            the resolved run config (YAML)
//   model             the resolved model spec (YAML)
//   aggregator        {"kind", "hidden", "gated", "dropout"} (JSON)
//   classes           ["3", "5", ...] (JSON), the output order of the head
//   normalization     {"mean": [...], "std": [...]} (JSON), after scaling pixels to [0, 1]
//   tiler             {"tile", "overlap", "border", "level", "downsample", "mode", "resize_size"} (JSON)
//   epoch             the last completed epoch (1-based)
// <name>.training.safetensors holds what exact resumption needs beyond the weights:
// the optimizer's state tensors and, in metadata, the trainer's counters.
// Both are written to a temporary name and renamed.
#include <map>
#include <string>

#include "net/aggregator.hpp"
#include "net/model.hpp"
#include "net/optimizer.hpp"
#include "net/safetensors.hpp"

namespace bigtrain {

void save_model_checkpoint(const std::string& path, net::Model& model, net::Aggregator& aggregator,
                           const net::Metadata& metadata);
// Loads weights saved by save_model_checkpoint into an identically built model and
// aggregator (exact shapes; an Error lists every mismatch). Returns the metadata.
net::Metadata load_model_checkpoint(const std::string& path, net::Model& model, net::Aggregator& aggregator);

void save_training_state(const std::string& path, const net::Optimizer& optimizer, const net::Metadata& metadata);
net::Metadata load_training_state(const std::string& path, net::Optimizer& optimizer);

}  // namespace bigtrain
