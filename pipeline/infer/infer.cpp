#include "pipeline/infer/infer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "net/model_spec.hpp"
#include "pipeline/data/tile_stream.hpp"
#include "pipeline/engine/checkpoint.hpp"
#include "pipeline/engine/two_pass.hpp"

namespace bigtrain {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

// The safetensors header alone: the model must be built from the metadata before
// its weights can be loaded, and reading every tensor twice would double the load.
net::Metadata read_metadata(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open the checkpoint ({})", path, std::strerror(errno)));
  unsigned char size_bytes[8] = {};
  in.read(reinterpret_cast<char*>(size_bytes), 8);
  if (in.gcount() != 8) throw Error(fmt::format("{}: not a safetensors checkpoint (shorter than 8 bytes)", path));
  std::uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | size_bytes[i];
  const auto file_size = static_cast<std::uint64_t>(fs::file_size(path));
  if (header_size == 0 || header_size > file_size - 8 || header_size > (std::uint64_t{100} << 20))
    throw Error(fmt::format("{}: not a safetensors checkpoint (header length {} in a file of {} bytes)", path,
                            header_size, file_size));
  std::string header(header_size, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_size));
  Json json = Json::parse(header, nullptr, false);
  if (json.is_discarded() || !json.is_object())
    throw Error(fmt::format("{}: not a safetensors checkpoint (the header is not a JSON object)", path));
  net::Metadata metadata;
  if (json.contains("__metadata__") && json["__metadata__"].is_object())
    for (const auto& [key, value] : json["__metadata__"].items())
      if (value.is_string()) metadata[key] = value.get<std::string>();
  return metadata;
}

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

bool is_image_file(const fs::path& path) {
  static const std::set<std::string> extensions = {".tif", ".tiff", ".svs", ".png", ".jpg", ".jpeg", ".bmp"};
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return extensions.count(ext) > 0;
}

std::vector<float> softmax_row(const float* logits, std::int64_t classes) {
  std::vector<float> p(static_cast<std::size_t>(classes));
  const float top = *std::max_element(logits, logits + classes);
  double sum = 0.0;
  for (std::int64_t k = 0; k < classes; ++k) sum += std::exp(static_cast<double>(logits[k] - top));
  for (std::int64_t k = 0; k < classes; ++k)
    p[static_cast<std::size_t>(k)] = static_cast<float>(std::exp(static_cast<double>(logits[k] - top)) / sum);
  return p;
}

}  // namespace

Preprocessing LoadedCheckpoint::preprocessing() const {
  Config config;
  config.data.mean = mean;
  config.data.std = std;
  return Preprocessing::from_config(config, static_cast<int>(model->spec().encoder.in_channels), false);
}

LoadedCheckpoint load_checkpoint_for_inference(const std::string& path) {
  if (!fs::is_regular_file(path)) throw Error(fmt::format("{}: no such checkpoint file", path));
  const net::Metadata metadata = read_metadata(path);
  LoadedCheckpoint c;
  c.path = path;

  // The full run config (bigtrain checkpoints) gives the tiler keys the `tiler`
  // summary leaves out (background filtering); `tiler` wins where both speak.
  if (auto found = metadata.find("config"); found != metadata.end()) {
    try {
      const Config config = parse_config(found->second, path + " (metadata `config`)");
      c.tiler = config.tiler;
      c.max_value = config.data.max_value;
      c.tile_batch = config.train.tile_batch;
      c.label_smoothing = config.train.label_smoothing;
    } catch (const Error& error) {
      spdlog::warn("{}: metadata `config` is ignored: {}", path, error.what());
    }
  }
  if (auto found = metadata.find("tiler"); found != metadata.end()) {
    const Json t = parse_json(path, "tiler", found->second);
    if (!t.is_object()) throw Error(fmt::format("{}: metadata `tiler` must be a JSON object", path));
    TilerConfig& tc = c.tiler;
    tc.mode = json_field(path, "tiler", t, "mode", tc.mode);
    tc.tile = json_field(path, "tiler", t, "tile", tc.tile);
    tc.overlap = json_field(path, "tiler", t, "overlap", tc.overlap);
    tc.border = json_field(path, "tiler", t, "border", tc.border);
    tc.level = json_field(path, "tiler", t, "level", tc.level);
    tc.downsample = json_field(path, "tiler", t, "downsample", tc.downsample);
    tc.min_foreground = json_field(path, "tiler", t, "min_foreground", tc.min_foreground);
    tc.foreground = json_field(path, "tiler", t, "foreground", tc.foreground);
    tc.resize_size = json_field(path, "tiler", t, "resize_size", tc.resize_size);
    c.tile_batch = json_field(path, "tiler", t, "tile_batch", c.tile_batch);
  }

  const Json classes = parse_json(path, "classes", required(metadata, path, "classes", "the class names, a JSON list"));
  if (!classes.is_array() || classes.empty())
    throw Error(fmt::format("{}: metadata `classes` must be a non-empty JSON list of names", path));
  for (const Json& name : classes) c.classes.push_back(name.is_string() ? name.get<std::string>() : name.dump());

  const Json normalization = parse_json(
      path, "normalization", required(metadata, path, "normalization", "{\"mean\": [...], \"std\": [...]}"));
  c.mean = number_list(path, normalization, "mean");
  c.std = number_list(path, normalization, "std");
  for (double s : c.std)
    if (!(s > 0)) throw Error(fmt::format("{}: metadata `normalization`.std holds {} (must be positive)", path, s));

  net::ModelSpec spec;
  try {
    spec = net::model_spec_from_yaml_string(required(metadata, path, "model", "the model spec, YAML"),
                                            path + " (metadata `model`)");
  } catch (const Error& error) {
    throw Error(fmt::format("{}: metadata `model`: {}", path, error.what()));
  }
  spec.pretrained.clear();  // the weights are this file's
  if (spec.num_classes != static_cast<std::int64_t>(c.classes.size()))
    throw Error(fmt::format("{}: metadata `model` has num_classes {}, `classes` names {}", path, spec.num_classes,
                            c.classes.size()));

  net::AggregatorSpec aggregator;
  aggregator.kind = net::AggregatorKind::mean;  // a plain classifier's checkpoint (no `aggregator` key)
  if (auto found = metadata.find("aggregator"); found != metadata.end()) {
    const Json a = parse_json(path, "aggregator", found->second);
    try {
      aggregator.kind = net::parse_aggregator_kind(json_field<std::string>(path, "aggregator", a, "kind", "mean"));
    } catch (const Error& error) {
      throw Error(fmt::format("{}: metadata `aggregator`: {}", path, error.what()));
    }
    aggregator.hidden = json_field(path, "aggregator", a, "hidden", aggregator.hidden);
    aggregator.gated = json_field(path, "aggregator", a, "gated", aggregator.gated);
    c.top_tiles = json_field<std::int64_t>(path, "aggregator", a, "top_tiles", 0);
  }
  c.model = std::make_unique<net::Model>(spec, 0, false);
  c.aggregator = net::make_aggregator(aggregator, c.model->encoder().feature_dim(), 0);
  load_model_checkpoint(path, *c.model, *c.aggregator);
  return c;
}

InferenceEngine::InferenceEngine(LoadedCheckpoint& checkpoint, InferenceOptions options)
    : checkpoint_(checkpoint), options_(options), tiler_(checkpoint.tiler) {
  if (options_.tile_batch <= 0) options_.tile_batch = checkpoint.tile_batch;
}

InferenceStats InferenceEngine::run(const std::vector<InferenceItem>& items,
                                    const std::function<void(ImagePrediction&&)>& on_result) {
  InferenceStats total;
  const auto started = Clock::now();
  ImageModel image_model{&checkpoint_.model->encoder(), checkpoint_.aggregator.get(), &checkpoint_.model->head()};
  TwoPassOptions step_options;
  step_options.backend = options_.backend;
  step_options.label_smoothing = static_cast<float>(checkpoint_.label_smoothing);
  step_options.top_tiles = checkpoint_.top_tiles;  // the model was trained to see these tiles only
  TwoPassStep step(image_model, step_options);
  const Preprocessing preprocessing = checkpoint_.preprocessing();
  const std::int64_t classes = checkpoint_.model->head().out_features();
  const bool attention = checkpoint_.aggregator->kind() == net::AggregatorKind::attention;

  // Results go out in item order; a failure stops the tile stream, so the stream is
  // restarted on the items still without a result (each failure settles one item,
  // so this ends).
  std::vector<std::optional<ImagePrediction>> ready(items.size());
  std::vector<bool> settled(items.size(), false);
  std::size_t next_to_report = 0;
  auto settle = [&](ImagePrediction&& p) {
    const std::size_t i = p.index;
    settled[i] = true;
    ready[i] = std::move(p);
    for (; next_to_report < items.size() && settled[next_to_report]; ++next_to_report) {
      if (!ready[next_to_report]->ok()) ++total.failed;
      ++total.images;
      on_result(std::move(*ready[next_to_report]));
      ready[next_to_report].reset();
    }
  };
  auto fail = [&](std::size_t i, const std::string& message) {
    ImagePrediction p;
    p.index = i;
    p.path = items[i].path;
    p.error = message;
    settle(std::move(p));
  };

  while (true) {
    std::vector<StreamJob> schedule;
    for (std::size_t i = 0; i < items.size(); ++i)
      if (!settled[i]) schedule.push_back({i, 0});
    if (schedule.empty()) break;

    std::map<std::size_t, Clock::time_point> planned_at;
    std::optional<std::size_t> planning;  // the image whose planner is running (or threw)
    std::optional<std::size_t> skipping;  // an image whose compute failed: its later batches are dropped
    // plan_ahead 0: the planner below records, unsynchronised with the consumer, which
    // image it is planning (to name a failed one) and when (its timing), so it must run
    // in the input node when the stream reaches the image, not ahead on another thread.
    TileStream stream({options_.tile_batch, options_.tiles_in_flight, options_.threads, 0}, preprocessing);
    try {
      const StreamStats stats = stream.run(
          schedule,
          [&](std::size_t i) {
            planning = i;
            planned_at[i] = Clock::now();
            ImagePlan plan = plan_image(items[i].path, tiler_, false, 0, 0, checkpoint_.max_value);
            planning.reset();
            return plan;
          },
          [&](const TileBatch& batch) {
            const std::size_t i = batch.image;
            if (skipping == i) return;
            try {
              const InferenceItem& item = items[i];
              if (batch.first_tile == 0)
                step.begin_image(static_cast<std::int64_t>(batch.plan->tiles.size()), std::max(item.label, 0), 0);
              step.eval_batch(batch.pixels, batch.first_tile);
              if (!batch.last_of_job) return;
              const ImageOutcome outcome = step.finish_eval();
              ImagePrediction p;
              p.index = i;
              p.path = item.path;
              p.probabilities = outcome.probabilities;
              p.top_class = static_cast<int>(std::max_element(p.probabilities.begin(), p.probabilities.end()) -
                                             p.probabilities.begin());
              p.loss = item.label >= 0 ? outcome.loss : 0.0f;
              p.tiles = outcome.tiles;
              p.grid_tiles = batch.plan->grid_tiles;
              p.background_dropped = batch.plan->background_dropped;
              if (options_.tile_results) {
                p.plan = batch.plan;
                const Tensor logits = checkpoint_.model->head().forward(
                    step.features(), net::ForwardContext::inference(options_.backend));
                const std::vector<float> host = logits.to_vector();
                std::vector<float> weights;
                if (attention) weights = step.attention().to_vector();
                p.tile_results.resize(static_cast<std::size_t>(outcome.tiles));
                for (std::int64_t t = 0; t < outcome.tiles; ++t) {
                  TileResult& r = p.tile_results[static_cast<std::size_t>(t)];
                  r.rect = batch.plan->tiles[static_cast<std::size_t>(t)];
                  r.attention = attention ? weights[static_cast<std::size_t>(t)] : std::nanf("");
                  r.class_scores = softmax_row(host.data() + t * classes, classes);
                }
              }
              step.end_image();
              p.seconds = std::chrono::duration<double>(Clock::now() - planned_at[i]).count();
              settle(std::move(p));
            } catch (const std::exception& error) {
              // The stream goes on with the next image.
              step.end_image();
              skipping = i;
              const std::string message = error.what();
              fail(i, message.find(items[i].path) != std::string::npos ? message
                                                                          : fmt::format("{}: {}", items[i].path, message));
            }
          });
      total.tiles += stats.tiles;
      total.wait_seconds += stats.wait_seconds;
    } catch (const std::exception& error) {
      step.end_image();
      const std::string message = error.what();
      // Which image failed: the one being planned, else the one whose path the
      // message names (the stream names it; the longest match, as paths may nest),
      // else the first still unsettled (it was being read or computed).
      std::optional<std::size_t> culprit = planning;
      if (!culprit) {
        std::size_t longest = 0;
        for (const StreamJob& job : schedule)
          if (!settled[job.image] && items[job.image].path.size() > longest &&
              message.find(items[job.image].path) != std::string::npos) {
            culprit = job.image;
            longest = items[job.image].path.size();
          }
      }
      if (!culprit)
        for (const StreamJob& job : schedule)
          if (!settled[job.image]) {
            culprit = job.image;
            break;
          }
      if (!culprit) throw;  // cannot happen: the schedule had unsettled images
      const std::size_t i = *culprit;
      fail(i, message.find(items[i].path) != std::string::npos ? message : fmt::format("{}: {}", items[i].path, message));
    }
  }
  total.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return total;
}

std::vector<std::string> expand_image_paths(const std::vector<std::string>& inputs) {
  std::vector<std::string> paths;
  for (const std::string& input : inputs) {
    std::error_code ec;
    if (!fs::is_directory(input, ec)) {
      paths.push_back(input);
      continue;
    }
    std::vector<std::string> found;
    for (auto it = fs::recursive_directory_iterator(input, fs::directory_options::skip_permission_denied, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      if (it->is_regular_file(ec) && is_image_file(it->path())) found.push_back(it->path().string());
    if (ec) throw Error(fmt::format("{}: cannot list the folder ({})", input, ec.message()));
    std::sort(found.begin(), found.end());
    if (found.empty()) spdlog::warn("{}: no image files (.tif, .tiff, .svs, .png, .jpg, .jpeg, .bmp)", input);
    paths.insert(paths.end(), found.begin(), found.end());
  }
  return paths;
}

}  // namespace bigtrain
