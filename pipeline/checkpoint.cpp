#include "pipeline/checkpoint.hpp"

#include <cstring>
#include <filesystem>

#include "kernels/core/error.hpp"

namespace bigtrain {
namespace {
constexpr const char* kAggregatorPrefix = "aggregator.";
}

void save_model_checkpoint(const std::string& path, net::Model& model, net::Aggregator& aggregator,
                           const net::Metadata& metadata) {
  net::SafetensorsFile file;
  file.tensors = model.state_dict();
  for (net::Parameter* p : aggregator.parameters()) file.tensors[p->name] = net::StoredTensor::from_tensor(p->value);
  file.metadata = metadata;
  file.metadata.insert_or_assign("bigtrain.format", std::string(1, '1'));
  net::write_safetensors(path, file);
}

net::Metadata load_model_checkpoint(const std::string& path, net::Model& model, net::Aggregator& aggregator) {
  net::SafetensorsFile file = net::read_safetensors(path);
  net::StateDict model_state;
  std::map<std::string, net::StoredTensor> aggregator_state;
  for (auto& [name, tensor] : file.tensors)
    (name.rfind(kAggregatorPrefix, 0) == 0 ? aggregator_state : model_state)[name] = std::move(tensor);
  net::LoadOptions exact;
  exact.grayscale_transfer = false;
  exact.reinit_mismatched_head = false;
  model.load_state_dict(model_state, exact, path);
  for (net::Parameter* p : aggregator.parameters()) {
    auto found = aggregator_state.find(p->name);
    if (found == aggregator_state.end())
      throw Error(fmt::format("{}: holds no `{}` (the config's aggregator differs from the checkpoint's)", path, p->name));
    Tensor value = found->second.to_f32();
    if (value.shape() != p->value.shape())
      throw Error(fmt::format("{}: `{}` has shape {}, the aggregator {}", path, p->name, shape_str(value.shape()),
                              shape_str(p->value.shape())));
    p->value.copy_from(value);
    aggregator_state.erase(found);
  }
  if (!aggregator_state.empty())
    throw Error(fmt::format("{}: `{}` does not belong to the configured aggregator", path,
                            aggregator_state.begin()->first));
  return file.metadata;
}

void save_training_state(const std::string& path, const net::Optimizer& optimizer, const net::Metadata& metadata) {
  net::SafetensorsFile file;
  for (const auto& [name, tensor] : optimizer.export_state()) file.tensors[name] = net::StoredTensor::from_tensor(tensor);
  file.metadata = metadata;
  file.metadata["optimizer"] = optimizer.kind();
  net::write_safetensors(path, file);
}

net::Metadata load_training_state(const std::string& path, net::Optimizer& optimizer) {
  net::SafetensorsFile file = net::read_safetensors(path);
  if (file.metadata["optimizer"] != optimizer.kind())
    throw Error(fmt::format("{}: saved by a {} optimizer, the config asks for {}", path, file.metadata["optimizer"],
                            optimizer.kind()));
  net::OptimizerState state;
  for (const auto& [name, stored] : file.tensors) {
    if (stored.dtype == net::StoredDType::I32) {
      Tensor t = Tensor::empty(stored.shape, DType::i32);
      std::memcpy(t.raw_data(), stored.bytes.data(), stored.bytes.size());
      state[name] = t;
    } else {
      state[name] = stored.to_f32();
    }
  }
  optimizer.import_state(state);
  return file.metadata;
}

}  // namespace bigtrain
