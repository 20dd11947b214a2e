#pragma once
// Checkpoints of a run. <name>.safetensors holds the model's state_dict under
// torchvision's names (conv1.weight, layer1.0.bn1.running_mean, fc.weight, ...) plus
// the aggregator's tensors under `aggregator.*`, and metadata (all strings, as the
// format requires; written and read by checkpoint_metadata.hpp, and
// bigtrain.format "1" added here).
//
// <name>.training.safetensors holds everything exact resumption needs on its own:
// the optimizer's state tensors, a copy of the weights under `resume.weights/`, and
// in metadata the trainer's counters. Resuming reads only this file, so the
// weights and optimizer state it resumes from can never be of different steps:
// each file is replaced atomically (temp name, fsync, rename), but two renames are
// not atomic together, and a kill between them would otherwise pair one step's
// weights with another step's optimizer state.
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

// model.pretrained: encoder and head weights (torchvision's, or a bigtrain checkpoint)
// with the model's adaptations (grey conv1, a head re-initialised for another class
// count). A bigtrain checkpoint's aggregator is loaded too when the configured one has
// exactly its tensors, so a run can continue another's training with a new schedule;
// otherwise the aggregator starts fresh and a note says why. Notes are returned.
std::vector<std::string> load_pretrained_weights(const std::string& path, net::Model& model,
                                                 net::Aggregator& aggregator);

// The metadata of a safetensors file, reading only its header (a checkpoint's
// tensors may be gigabytes). Throws Error naming the file when it is not one.
net::Metadata read_checkpoint_metadata(const std::string& path);

void save_training_state(const std::string& path, net::Model& model, net::Aggregator& aggregator,
                         const net::Optimizer& optimizer, const net::Metadata& metadata);

struct LoadedTrainingState {
  net::Metadata metadata;
  // False for a training state written before it carried the weights: the caller
  // must then load them from the weights file and check that both name one step.
  bool loaded_weights = false;
};
// Restores the optimizer state and, when the file carries them, the weights.
LoadedTrainingState load_training_state(const std::string& path, net::Optimizer& optimizer, net::Model& model,
                                        net::Aggregator& aggregator);

}  // namespace bigtrain
