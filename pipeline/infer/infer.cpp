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
#include "kernels/core/out_of_memory.hpp"
#include "kernels/upload.hpp"
#include "net/model_spec.hpp"
#include "pipeline/data/image_region_reader.hpp"
#include "pipeline/data/tile_stream.hpp"
#include "pipeline/engine/checkpoint.hpp"
#include "pipeline/engine/stream_step.hpp"
#include "pipeline/engine/two_pass.hpp"

namespace bigtrain {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

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
  config.data.normalize = normalize;  // as the run's evaluation read its tiles
  config.data.highpass_sigma = highpass_sigma;
  return Preprocessing::from_config(config, static_cast<int>(model->spec().encoder.in_channels), false);
}

LoadedCheckpoint load_checkpoint_for_inference(const std::string& path,
                                               const std::vector<TilerOverride>& tiler_overrides) {
  if (!fs::is_regular_file(path)) throw Error(fmt::format("{}: no such checkpoint file", path));
  LoadedCheckpoint c;
  static_cast<CheckpointMetadata&>(c) = parse_checkpoint_metadata(read_checkpoint_metadata(path), path);
  c.path = path;
  c.tiler = override_tiler(c.tiler, tiler_overrides, path + " (its tiling)");
  net::ModelSpec spec = c.model_spec;
  spec.pretrained.clear();  // the weights are this file's
  net::AggregatorSpec aggregator = c.aggregator_spec;
  aggregator.dropout = 0.0f;  // training only
  c.model = std::make_unique<net::Model>(spec, 0, false);
  c.aggregator = net::make_aggregator(aggregator, c.model->encoder().feature_dim(), 0);
  load_model_checkpoint(path, *c.model, *c.aggregator);
  return c;
}

InferenceEngine::InferenceEngine(LoadedCheckpoint& checkpoint, InferenceOptions options)
    : checkpoint_(checkpoint), options_(options) {
  if (options_.tile_batch <= 0) options_.tile_batch = checkpoint.tile_batch;
  // The checkpoint loads on the host; a GPU run moves its weights once, here.
  checkpoint_.model->to(backend_device(options_.backend));
  checkpoint_.aggregator->to(backend_device(options_.backend));
}

InferenceStats InferenceEngine::run(const std::vector<InferenceItem>& items,
                                    const std::function<void(ImagePrediction&&)>& on_result) {
  MemoryPhase phase(options_.memory_phase);
  if (checkpoint_.tiler.mode == TilerMode::stream) return run_streamed(items, on_result);
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
            ImageTiling plan = image_tiling(items[i].path, checkpoint_.tiler, false, 0, 0, checkpoint_.max_value);
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
              // Training's upload path: pinned staging and the copy stream on CUDA, the
              // host tensor itself on the CPU.
              step.eval_batch(kernels::upload_async(options_.backend, batch.pixels).get(), batch.first_tile);
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

InferenceStats InferenceEngine::run_streamed(const std::vector<InferenceItem>& items,
                                             const std::function<void(ImagePrediction&&)>& on_result) {
  InferenceStats total;
  const auto started = Clock::now();
  ImageModel image_model{&checkpoint_.model->encoder(), checkpoint_.aggregator.get(), &checkpoint_.model->head()};
  StreamStepOptions step_options;
  step_options.backend = options_.backend;
  step_options.tile = checkpoint_.tiler.tile;
  step_options.label_smoothing = static_cast<float>(checkpoint_.label_smoothing);
  StreamStep step(image_model, step_options, false);
  const Preprocessing preprocessing = checkpoint_.preprocessing();
  const std::int64_t classes = checkpoint_.model->head().out_features();
  const bool attention = checkpoint_.aggregator->kind() == net::AggregatorKind::attention;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const InferenceItem& item = items[i];
    const auto image_started = Clock::now();
    ImagePrediction p;
    p.index = i;
    p.path = item.path;
    try {
      ImageRegionReader reader(item.path, checkpoint_.tiler, preprocessing, checkpoint_.max_value);
      const ImageOutcome outcome = step.eval_image(reader, std::max(item.label, 0));
      p.probabilities = outcome.probabilities;
      p.top_class = static_cast<int>(std::max_element(p.probabilities.begin(), p.probabilities.end()) -
                                     p.probabilities.begin());
      p.loss = item.label >= 0 ? outcome.loss : 0.0f;
      p.tiles = outcome.tiles;
      p.grid_tiles = outcome.tiles;
      total.tiles += outcome.tiles;
      if (options_.tile_results) {
        // Each cell of the map is a tile result: the pixels of its stride, the head
        // applied to its feature (a class activation map), its attention weight.
        const net::StreamPlan& plan = step.last_plan();
        const std::int64_t stride = plan.field.y.stride, cells_y = plan.feature_map[2], cells_x = plan.feature_map[3];
        auto tiling = std::make_shared<ImageTiling>();
        tiling->path = item.path;
        tiling->source = reader.source();
        tiling->sampling = reader.sampling();
        tiling->tile_size = static_cast<int>(stride);
        tiling->full_scale = reader.full_scale();
        const cv::Rect image_rect(0, 0, static_cast<int>(reader.sampling().width),
                                  static_cast<int>(reader.sampling().height));
        const std::vector<float> logits =
            checkpoint_.model->head()
                .forward(step.cell_features(), net::ForwardContext::inference(options_.backend))
                .to_vector();
        std::vector<float> weights;
        if (attention) weights = step.attention().to(Device::cpu()).to_vector();
        for (std::int64_t cy = 0; cy < cells_y; ++cy)
          for (std::int64_t cx = 0; cx < cells_x; ++cx) {
            const std::int64_t k = cy * cells_x + cx;
            TileResult r;
            r.rect = cv::Rect(static_cast<int>(cx * stride), static_cast<int>(cy * stride), static_cast<int>(stride),
                              static_cast<int>(stride)) &
                     image_rect;
            if (r.rect.empty()) continue;  // a cell of the padding beyond the image's last pixel
            r.attention = attention ? weights[static_cast<std::size_t>(k)] : std::nanf("");
            r.class_scores = softmax_row(logits.data() + k * classes, classes);
            tiling->tiles.push_back(r.rect);
            p.tile_results.push_back(std::move(r));
          }
        p.plan = std::move(tiling);
      }
      step.end_image();
    } catch (const std::exception& error) {
      step.end_image();
      const std::string message = error.what();
      p = ImagePrediction();
      p.index = i;
      p.path = item.path;
      p.error = message.find(item.path) != std::string::npos ? message : fmt::format("{}: {}", item.path, message);
    }
    p.seconds = std::chrono::duration<double>(Clock::now() - image_started).count();
    if (!p.ok()) ++total.failed;
    ++total.images;
    on_result(std::move(p));
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
