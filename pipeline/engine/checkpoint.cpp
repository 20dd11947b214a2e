#include "pipeline/engine/checkpoint.hpp"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/core/error.hpp"

namespace bigtrain {
namespace {
constexpr const char* kAggregatorPrefix = "aggregator.";
// Weights inside the training state; '/' never occurs in a torchvision or
// optimizer state name, so nothing else can start with it.
constexpr const char* kResumeWeightsPrefix = "resume.weights/";

net::StateDict weights_of(net::Model& model, net::Aggregator& aggregator) {
  net::StateDict tensors = model.state_dict();
  for (net::Parameter* p : aggregator.parameters()) tensors[p->name] = net::StoredTensor::from_tensor(p->value);
  return tensors;
}

// `tensors` holds exactly the model's and the aggregator's tensors; `source` names them in errors.
void load_weights(net::StateDict tensors, const std::string& source, net::Model& model, net::Aggregator& aggregator) {
  net::StateDict model_state;
  std::map<std::string, net::StoredTensor> aggregator_state;
  for (auto& [name, tensor] : tensors)
    (name.rfind(kAggregatorPrefix, 0) == 0 ? aggregator_state : model_state)[name] = std::move(tensor);
  net::LoadOptions exact;
  exact.grayscale_transfer = false;
  exact.reinit_mismatched_head = false;
  model.load_state_dict(model_state, exact, source);
  for (net::Parameter* p : aggregator.parameters()) {
    auto found = aggregator_state.find(p->name);
    if (found == aggregator_state.end())
      throw Error(fmt::format("{}: holds no `{}` (the config's aggregator differs from the checkpoint's)", source, p->name));
    Tensor value = found->second.to_f32();
    if (value.shape() != p->value.shape())
      throw Error(fmt::format("{}: `{}` has shape {}, the aggregator {}", source, p->name, shape_str(value.shape()),
                              shape_str(p->value.shape())));
    p->value.copy_from(value);
    aggregator_state.erase(found);
  }
  if (!aggregator_state.empty())
    throw Error(fmt::format("{}: `{}` does not belong to the configured aggregator", source,
                            aggregator_state.begin()->first));
}

}  // namespace

std::vector<std::string> load_pretrained_weights(const std::string& path, net::Model& model,
                                                 net::Aggregator& aggregator) {
  net::SafetensorsFile file = net::read_safetensors(path);
  net::StateDict model_state, aggregator_state;
  for (auto& [name, tensor] : file.tensors)
    (name.rfind(kAggregatorPrefix, 0) == 0 ? aggregator_state : model_state)[name] = std::move(tensor);
  std::vector<std::string> notes = model.load_state_dict(model_state, {}, path).notes;
  if (aggregator_state.empty()) return notes;
  std::string mismatch;
  for (net::Parameter* p : aggregator.parameters()) {
    auto found = aggregator_state.find(p->name);
    if (found == aggregator_state.end()) {
      mismatch = fmt::format("it holds no `{}`", p->name);
      break;
    }
    if (found->second.shape != p->value.shape()) {
      mismatch = fmt::format("`{}` has shape {}, the configured aggregator's {}", p->name,
                             shape_str(found->second.shape), shape_str(p->value.shape()));
      break;
    }
  }
  if (mismatch.empty() && aggregator_state.size() != aggregator.parameters().size())
    mismatch = "it holds tensors the configured aggregator does not have";
  if (!mismatch.empty()) {
    notes.push_back(fmt::format("the aggregator starts fresh: {} in {}", mismatch, path));
    return notes;
  }
  for (net::Parameter* p : aggregator.parameters()) p->value.copy_from(aggregator_state.at(p->name).to_f32());
  notes.push_back(fmt::format("the aggregator's {} tensors loaded too", aggregator_state.size()));
  return notes;
}

void save_model_checkpoint(const std::string& path, net::Model& model, net::Aggregator& aggregator,
                           const net::Metadata& metadata) {
  net::SafetensorsFile file;
  file.tensors = weights_of(model, aggregator);
  file.metadata = metadata;
  file.metadata.insert_or_assign("bigtrain.format", std::string(1, '1'));
  net::write_safetensors(path, file);
}

net::Metadata load_model_checkpoint(const std::string& path, net::Model& model, net::Aggregator& aggregator) {
  net::SafetensorsFile file = net::read_safetensors(path);
  load_weights(std::move(file.tensors), path, model, aggregator);
  return file.metadata;
}

net::Metadata read_checkpoint_metadata(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  unsigned char length_bytes[8] = {};
  in.read(reinterpret_cast<char*>(length_bytes), sizeof(length_bytes));
  if (!in) throw Error(fmt::format("{}: not a safetensors file (shorter than its 8-byte header length)", path));
  std::uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | length_bytes[i];
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  // Bounded by the file and by 100 MiB (headers of real checkpoints are kilobytes), so
  // a corrupt length never becomes a huge allocation.
  if (error || length > size - 8 || length > (std::uint64_t{100} << 20))
    throw Error(fmt::format("{}: not a safetensors file (header of {} bytes in a file of {})", path, length, size));
  std::string header(length, '\0');
  in.read(header.data(), static_cast<std::streamsize>(length));
  if (!in) throw Error(fmt::format("{}: truncated safetensors header", path));
  const nlohmann::json json = nlohmann::json::parse(header, nullptr, false);
  if (!json.is_object()) throw Error(fmt::format("{}: the safetensors header is not a JSON object", path));
  net::Metadata metadata;
  if (const auto found = json.find("__metadata__"); found != json.end() && found->is_object())
    for (const auto& [key, value] : found->items())
      if (value.is_string()) metadata[key] = value.get<std::string>();
  return metadata;
}

void save_training_state(const std::string& path, net::Model& model, net::Aggregator& aggregator,
                         const net::Optimizer& optimizer, const net::Metadata& metadata) {
  net::SafetensorsFile file;
  for (const auto& [name, tensor] : optimizer.export_state()) file.tensors[name] = net::StoredTensor::from_tensor(tensor);
  for (auto& [name, tensor] : weights_of(model, aggregator))
    file.tensors[kResumeWeightsPrefix + name] = std::move(tensor);
  file.metadata = metadata;
  file.metadata["optimizer"] = optimizer.kind();
  net::write_safetensors(path, file);
}

LoadedTrainingState load_training_state(const std::string& path, net::Optimizer& optimizer, net::Model& model,
                                        net::Aggregator& aggregator) {
  net::SafetensorsFile file = net::read_safetensors(path);
  if (file.metadata["optimizer"] != optimizer.kind())
    throw Error(fmt::format("{}: saved by a {} optimizer, the config asks for {}", path, file.metadata["optimizer"],
                            optimizer.kind()));
  net::OptimizerState state;
  net::StateDict weights;
  const std::size_t prefix_length = std::strlen(kResumeWeightsPrefix);
  for (auto& [name, stored] : file.tensors) {
    if (name.rfind(kResumeWeightsPrefix, 0) == 0) {
      weights[name.substr(prefix_length)] = std::move(stored);
    } else if (stored.dtype == net::StoredDType::I32) {
      Tensor t = Tensor::empty(stored.shape, DType::i32);
      std::memcpy(t.raw_data(), stored.bytes.data(), stored.bytes.size());
      state[name] = t;
    } else {
      state[name] = stored.to_f32();
    }
  }
  optimizer.import_state(state);
  LoadedTrainingState loaded;
  loaded.loaded_weights = !weights.empty();
  if (loaded.loaded_weights) load_weights(std::move(weights), path, model, aggregator);
  loaded.metadata = std::move(file.metadata);
  return loaded;
}

}  // namespace bigtrain
