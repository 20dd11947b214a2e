#include "pipeline/engine/checkpoint_metadata.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"

namespace bigtrain {
namespace {

using Json = nlohmann::json;

const std::string& required(const net::Metadata& metadata, const std::string& path, const std::string& key,
                            const char* what) {
  auto found = metadata.find(key);
  if (found == metadata.end())
    throw Error(fmt::format("{}: the checkpoint's metadata has no `{}` ({}); see docs/checkpoints.md", path, key,
                            what));
  return found->second;
}

Json parse_json(const std::string& path, const std::string& key, const std::string& text) {
  Json json = Json::parse(text, nullptr, false);
  if (json.is_discarded())
    throw Error(fmt::format("{}: metadata `{}` is not valid JSON: {}", path, key, text.substr(0, 200)));
  return json;
}

template <typename T>
T json_field(const std::string& path, const std::string& key, const Json& object, const char* field, T fallback) {
  if (!object.contains(field)) return fallback;
  try {
    return object.at(field).get<T>();
  } catch (const Json::exception&) {
    throw Error(fmt::format("{}: metadata `{}`.{} has the wrong type: {}", path, key, field, object.at(field).dump()));
  }
}

// A closed choice of the tiling (choices.hpp), spelt as a config spells it.
template <typename E>
E json_choice(const std::string& path, const std::string& key, const Json& object, const char* field, E fallback) {
  const std::string name = json_field(path, key, object, field, std::string(choice_name(fallback)));
  if (const auto value = parse_choice<E>(name)) return *value;
  std::vector<std::string_view> names;
  for (const auto& choice : choices_of(fallback)) names.push_back(choice.name);
  throw Error(fmt::format("{}: metadata `{}`.{} must be one of {}, got '{}'", path, key, field,
                          fmt::join(names, " | "), name));
}

std::vector<double> number_list(const std::string& path, const Json& normalization, const char* field) {
  const Json& list = normalization.contains(field) ? normalization.at(field) : Json();
  if (!list.is_array() || list.empty())
    throw Error(fmt::format("{}: metadata `normalization` needs a non-empty list `{}`, got {}", path, field,
                            list.dump()));
  std::vector<double> values;
  for (const Json& v : list) {
    if (!v.is_number()) throw Error(fmt::format("{}: metadata `normalization`.{} holds {}", path, field, v.dump()));
    values.push_back(v.get<double>());
  }
  return values;
}

// The run config's keys that inference repeats.
void read_run_config(CheckpointMetadata& m, const std::string& path) {
  try {
    const Config config = parse_config(m.run_config, path + " (metadata `config`)");
    m.tiler = config.tiler;
    m.max_value = config.data.max_value;
    m.normalize = config.data.normalize;
    m.highpass_sigma = config.data.highpass_sigma;
    m.tile_batch = config.train.tile_batch;
    m.label_smoothing = config.train.label_smoothing;
    m.precision = choice_name(config.train.precision);
  } catch (const Error& error) {
    spdlog::warn("{}: metadata `config` is ignored: {}", path, error.what());
  }
}

void read_tiler_json(CheckpointMetadata& m, const std::string& path, const std::string& text) {
  const Json t = parse_json(path, "tiler", text);
  if (!t.is_object()) throw Error(fmt::format("{}: metadata `tiler` must be a JSON object", path));
  TilerConfig& tc = m.tiler;
  tc.mode = json_choice(path, "tiler", t, "mode", tc.mode);
  tc.tile = json_field(path, "tiler", t, "tile", tc.tile);
  tc.overlap = json_field(path, "tiler", t, "overlap", tc.overlap);
  tc.border = json_choice(path, "tiler", t, "border", tc.border);
  tc.level = json_field(path, "tiler", t, "level", tc.level);
  tc.downsample = json_field(path, "tiler", t, "downsample", tc.downsample);
  tc.min_foreground = json_field(path, "tiler", t, "min_foreground", tc.min_foreground);
  tc.foreground = json_choice(path, "tiler", t, "foreground", tc.foreground);
  tc.resize_size = json_field(path, "tiler", t, "resize_size", tc.resize_size);
  m.tile_batch = json_field(path, "tiler", t, "tile_batch", m.tile_batch);
}

}  // namespace

CheckpointMetadata checkpoint_metadata_of_run(const Config& config, const net::ModelSpec& model,
                                              const std::vector<std::string>& classes) {
  CheckpointMetadata m;
  m.model_spec = model;
  m.aggregator_spec = aggregator_spec(config.aggregator);
  m.top_tiles = config.aggregator.top_tiles;
  m.classes = classes;
  m.mean = config.data.mean;
  m.std = config.data.std;
  m.tiler = config.tiler;
  m.max_value = config.data.max_value;
  m.normalize = config.data.normalize;
  m.highpass_sigma = config.data.highpass_sigma;
  m.tile_batch = config.train.tile_batch;
  m.label_smoothing = config.train.label_smoothing;
  m.precision = choice_name(config.train.precision);
  m.run_config = config_to_yaml(config);
  return m;
}

net::Metadata to_safetensors_metadata(const CheckpointMetadata& m) {
  net::Metadata metadata;
  metadata["model"] = net::to_yaml_string(m.model_spec);
  metadata["aggregator"] = Json{{"kind", net::aggregator_kind_name(m.aggregator_spec.kind)},
                                {"hidden", m.aggregator_spec.hidden},
                                {"gated", m.aggregator_spec.gated},
                                {"dropout", m.aggregator_spec.dropout},
                                {"top_tiles", m.top_tiles}}
                               .dump();
  metadata["classes"] = Json(m.classes).dump();
  metadata["normalization"] = Json{{"mean", m.mean}, {"std", m.std}}.dump();
  if (!m.run_config.empty()) {
    metadata["config"] = m.run_config;
  } else {
    const TilerConfig& t = m.tiler;
    metadata["tiler"] = Json{{"mode", std::string(choice_name(t.mode))},
                             {"tile", t.tile},
                             {"overlap", t.overlap},
                             {"border", std::string(choice_name(t.border))},
                             {"level", t.level},
                             {"downsample", t.downsample},
                             {"min_foreground", t.min_foreground},
                             {"foreground", std::string(choice_name(t.foreground))},
                             {"resize_size", t.resize_size},
                             {"tile_batch", m.tile_batch}}
                            .dump();
  }
  if (m.epoch >= 0) metadata["epoch"] = std::to_string(m.epoch);
  if (!m.training_state.empty()) metadata["bigtrain.checkpoint"] = m.training_state;
  return metadata;
}

CheckpointMetadata parse_checkpoint_metadata(const net::Metadata& metadata, const std::string& path) {
  CheckpointMetadata m;
  if (auto found = metadata.find("config"); found != metadata.end()) {
    m.run_config = found->second;
    read_run_config(m, path);
  }
  if (auto found = metadata.find("tiler"); found != metadata.end()) read_tiler_json(m, path, found->second);

  const Json classes = parse_json(path, "classes", required(metadata, path, "classes", "the class names, a JSON list"));
  if (!classes.is_array() || classes.empty())
    throw Error(fmt::format("{}: metadata `classes` must be a non-empty JSON list of names", path));
  for (const Json& name : classes) m.classes.push_back(name.is_string() ? name.get<std::string>() : name.dump());

  const Json normalization = parse_json(
      path, "normalization", required(metadata, path, "normalization", "{\"mean\": [...], \"std\": [...]}"));
  m.mean = number_list(path, normalization, "mean");
  m.std = number_list(path, normalization, "std");
  for (double s : m.std)
    if (!(s > 0)) throw Error(fmt::format("{}: metadata `normalization`.std holds {} (must be positive)", path, s));

  try {
    m.model_spec = net::model_spec_from_yaml_string(required(metadata, path, "model", "the model spec, YAML"),
                                                    path + " (metadata `model`)");
  } catch (const Error& error) {
    throw Error(fmt::format("{}: metadata `model`: {}", path, error.what()));
  }
  if (m.model_spec.num_classes != static_cast<std::int64_t>(m.classes.size()))
    throw Error(fmt::format("{}: metadata `model` has num_classes {}, `classes` names {}", path,
                            m.model_spec.num_classes, m.classes.size()));

  m.aggregator_spec.kind = net::AggregatorKind::mean;  // a plain classifier's checkpoint (no `aggregator` key)
  if (auto found = metadata.find("aggregator"); found != metadata.end()) {
    const Json a = parse_json(path, "aggregator", found->second);
    try {
      m.aggregator_spec.kind = net::parse_aggregator_kind(json_field<std::string>(path, "aggregator", a, "kind", "mean"));
    } catch (const Error& error) {
      throw Error(fmt::format("{}: metadata `aggregator`: {}", path, error.what()));
    }
    m.aggregator_spec.hidden = json_field(path, "aggregator", a, "hidden", m.aggregator_spec.hidden);
    m.aggregator_spec.gated = json_field(path, "aggregator", a, "gated", m.aggregator_spec.gated);
    m.aggregator_spec.dropout = json_field(path, "aggregator", a, "dropout", m.aggregator_spec.dropout);
    m.top_tiles = json_field<std::int64_t>(path, "aggregator", a, "top_tiles", 0);
  }

  if (auto found = metadata.find("epoch"); found != metadata.end()) {
    // Informational (docs/checkpoints.md): a checkpoint made elsewhere may write anything.
    try {
      m.epoch = std::stoll(found->second);
    } catch (const std::exception&) {
      m.epoch = -1;
    }
  }
  if (auto found = metadata.find("bigtrain.checkpoint"); found != metadata.end()) m.training_state = found->second;
  return m;
}

}  // namespace bigtrain
