// `bigtrain infer IMAGE|DIR... --checkpoint CKPT [--json] [--heatmap OUT] [--tiles-csv OUT]`:
// image-level predictions from a checkpoint, with tile heatmaps.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "kernels/device_select.hpp"
#include "pipeline/cli/command_registry.hpp"
#include "pipeline/common/atomic_file.hpp"
#include "pipeline/distributed/distributed.hpp"
#include "pipeline/distributed/distributed_training.hpp"
#include "pipeline/infer/heatmap.hpp"
#include "pipeline/infer/infer.hpp"
#include "pipeline/infer/infer_shard.hpp"

namespace bigtrain::cli {
namespace {
namespace fs = std::filesystem;

struct InferArgs {
  std::vector<std::string> inputs;
  std::string checkpoint;
  bool json = false;
  std::string heatmap;
  std::string heatmap_class;
  std::string tiles_csv;
  std::string device = "cpu";
  std::int64_t device_index = 0;
  std::int64_t tile = 0, overlap = -1, level = -1, tile_batch = 0, threads = 0;
  double downsample = 0.0, min_foreground = -1.0;
  std::string border, foreground;
};

// One output file per image when there are several: <base>_<image stem><ext>, the
// image's index added where two images share a stem.
std::map<std::size_t, std::string> output_paths(const std::string& base, const std::vector<std::string>& images) {
  std::map<std::size_t, std::string> out;
  std::map<std::string, int> stems;
  for (const auto& image : images) ++stems[fs::path(image).stem().string()];
  for (std::size_t i = 0; i < images.size(); ++i) {
    const bool shared = stems[fs::path(images[i]).stem().string()] > 1;
    out[i] = heatmap_path_for(base, shared ? fmt::format("{}_{}", i, fs::path(images[i]).stem().string()) : images[i],
                              images.size() > 1);
  }
  return out;
}

std::string tiles_csv(const ImagePrediction& p, const std::vector<std::string>& classes, bool attention) {
  std::string csv = "tile,x,y,width,height,level,downsample";
  if (attention) csv += ",attention";
  for (const auto& name : classes) csv += ",p_" + name;
  csv += "\n";
  const auto& s = p.plan->sampling;
  for (std::size_t t = 0; t < p.tile_results.size(); ++t) {
    const TileResult& r = p.tile_results[t];
    // Level-0 pixel coordinates: what a viewer of the original image shows.
    csv += fmt::format("{},{},{},{},{},{},{:.6g}", t, std::llround(r.rect.x * s.downsample),
                       std::llround(r.rect.y * s.downsample), std::llround(r.rect.width * s.downsample),
                       std::llround(r.rect.height * s.downsample), s.level, s.downsample);
    if (attention) csv += fmt::format(",{:.9g}", r.attention);
    for (float score : r.class_scores) csv += fmt::format(",{:.9g}", score);
    csv += "\n";
  }
  return csv;
}

// Prints one image's output (rank 0, in input order).
void emit(const ItemReport& report) {
  for (const std::string& error : report.errors) spdlog::error("{}", error);
  if (!report.out.empty()) fmt::print("{}", report.out);
  std::fflush(stdout);
}

int run_infer(const InferArgs& a, Communicator& comm) {
  // Ranks of an mpirun have their node-local GPU already (DistributedSession).
  if (!comm.distributed()) set_cuda_backend_device(static_cast<int>(a.device_index));
  const Backend backend = kernels::select_backend(a.device);
  spdlog::info("device: {}", kernels::describe_backend_choice(backend));
  // The flags change the checkpoint's tiling before anything is built, checked as a
  // config's tiler section is.
  std::vector<TilerOverride> overrides;
  auto flag = [&](const char* key, const char* name, const auto& value) {
    overrides.push_back({key, fmt::format("{}", value), fmt::format("{} {}", name, value)});
  };
  if (a.tile > 0) flag("tile", "--tile", a.tile);
  if (a.overlap >= 0) flag("overlap", "--overlap", a.overlap);
  if (!a.border.empty()) flag("border", "--border", a.border);
  if (a.level >= 0) flag("level", "--level", a.level);
  if (a.downsample > 0) flag("downsample", "--downsample", a.downsample);
  if (a.min_foreground >= 0) flag("min_foreground", "--min-foreground", a.min_foreground);
  if (!a.foreground.empty()) flag("foreground", "--foreground", a.foreground);
  LoadedCheckpoint checkpoint = load_checkpoint_for_inference(a.checkpoint, overrides);
  InferenceOptions options;
  options.backend = backend;
  options.tile_batch = a.tile_batch;
  options.threads = static_cast<int>(a.threads);
  options.tile_results = !a.heatmap.empty() || !a.tiles_csv.empty();
  InferenceEngine engine(checkpoint, options);

  const bool attention = checkpoint.aggregator->kind() == net::AggregatorKind::attention;
  int heatmap_class = -1;
  if (!a.heatmap_class.empty()) {
    auto found = std::find(checkpoint.classes.begin(), checkpoint.classes.end(), a.heatmap_class);
    BT_CHECK(found != checkpoint.classes.end(), "--heatmap-class {}: the checkpoint's classes are {}",
             a.heatmap_class, nlohmann::json(checkpoint.classes).dump());
    heatmap_class = static_cast<int>(found - checkpoint.classes.begin());
  }
  std::string heatmap_kind;
  if (!a.heatmap.empty()) {
    const std::string ext = fs::path(a.heatmap).extension().string();
    heatmap_kind = ext == ".png" ? "png" : (ext == ".tif" || ext == ".tiff") ? "tiff" : "";
    BT_CHECK(!heatmap_kind.empty(), "--heatmap {}: give a .png or a .tif/.tiff file name", a.heatmap);
  }

  const std::vector<std::string> images = expand_image_paths(a.inputs);
  BT_CHECK(!images.empty(), "no images found in {}", nlohmann::json(a.inputs).dump());
  // This rank's share, round robin; run() numbers its items 0.. in this order.
  const std::vector<std::size_t> mine = shard_indices(images.size(), comm);
  std::vector<InferenceItem> items;
  for (std::size_t i : mine) items.push_back({images[i], -1});
  const auto heatmaps = output_paths(a.heatmap, images);
  const auto csvs = output_paths(a.tiles_csv, images);
  for (const std::string* out : {&a.heatmap, &a.tiles_csv})
    if (!out->empty() && fs::path(*out).has_parent_path()) fs::create_directories(fs::path(*out).parent_path());

  std::int64_t failed_outputs = 0;
  std::vector<ItemReport> reports;  // distributed: printed by rank 0 after the gather
  const auto started = std::chrono::steady_clock::now();
  InferenceStats stats;
  if (!items.empty()) stats = engine.run(items, [&](ImagePrediction&& p) {
    ItemReport report;
    report.index = mine.at(p.index);
    if (!p.ok()) {
      report.errors.push_back(p.error);
      if (a.json) report.out = nlohmann::json{{"path", p.path}, {"error", p.error}}.dump() + "\n";
    } else {
      const std::string& top = checkpoint.classes[static_cast<std::size_t>(p.top_class)];
      if (a.json) {
        nlohmann::json probabilities = nlohmann::json::object();
        for (std::size_t k = 0; k < checkpoint.classes.size(); ++k)
          probabilities[checkpoint.classes[k]] = p.probabilities[k];
        report.out = nlohmann::json{{"path", p.path},
                                    {"probabilities", probabilities},
                                    {"top_class", top},
                                    {"top_probability", p.probabilities[static_cast<std::size_t>(p.top_class)]},
                                    {"tiles", p.tiles},
                                    {"grid_tiles", p.grid_tiles},
                                    {"background_dropped", p.background_dropped},
                                    {"seconds", p.seconds}}
                         .dump() +
                     "\n";
      } else {
        std::string scores;
        for (std::size_t k = 0; k < checkpoint.classes.size(); ++k)
          scores += fmt::format("  {} {:.4f}", checkpoint.classes[k], p.probabilities[k]);
        report.out = fmt::format("{}: {} ({:.4f}){}  [{} tiles, {:.2f} s]\n", p.path, top,
                                 p.probabilities[static_cast<std::size_t>(p.top_class)], scores, p.tiles, p.seconds);
      }
      // One process prints the result before writing the image's files, so it shows
      // as soon as it is known.
      if (!comm.distributed()) {
        emit(report);
        report.out.clear();
      }
      try {
        if (!heatmap_kind.empty()) {
          const HeatmapValues values = heatmap_values(p, checkpoint.classes, attention, heatmap_class);
          const std::string& out = heatmaps.at(report.index);
          if (heatmap_kind == "png") write_heatmap_png(out, p, values);
          else write_heatmap_tiff(out, p, values);
        }
        if (!a.tiles_csv.empty())
          write_file_atomically(csvs.at(report.index), tiles_csv(p, checkpoint.classes, attention));
      } catch (const std::exception& error) {
        report.errors.push_back(fmt::format("{}: writing its outputs failed: {}", p.path, error.what()));
        ++failed_outputs;
      }
    }
    if (comm.distributed()) reports.push_back(std::move(report));
    else emit(report);
  });
  std::string shares;  // images per rank: "4+3"
  if (comm.distributed()) {
    for (const ItemReport& report : gather_reports(comm, reports)) emit(report);
    // One exit code and one summary for the job: every rank's counts summed.
    // Slot 4 + r holds rank r's image count, for the summary line.
    std::vector<double> counts(4 + static_cast<std::size_t>(comm.size()), 0.0);
    counts[0] = static_cast<double>(stats.images);
    counts[1] = static_cast<double>(stats.failed);
    counts[2] = static_cast<double>(stats.tiles);
    counts[3] = static_cast<double>(failed_outputs);
    counts[4 + static_cast<std::size_t>(comm.rank())] = static_cast<double>(stats.images);
    comm.allreduce_sum(counts);
    stats.images = static_cast<std::int64_t>(counts[0]);
    stats.failed = static_cast<std::int64_t>(counts[1]);
    stats.tiles = static_cast<std::int64_t>(counts[2]);
    failed_outputs = static_cast<std::int64_t>(counts[3]);
    for (int r = 0; r < comm.size(); ++r)
      shares += fmt::format("{}{}", r == 0 ? "" : "+", static_cast<std::int64_t>(counts[4 + static_cast<std::size_t>(r)]));
    // The gather waited for the slowest rank: this is the job's wall time.
    stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  }
  spdlog::info("{} images ({} failed), {} tiles in {:.2f} s: {:.1f} tiles/s{}", stats.images, stats.failed, stats.tiles,
               stats.seconds, static_cast<double>(stats.tiles) / std::max(stats.seconds, 1e-9),
               comm.distributed() ? fmt::format(" ({}: {} images)", comm.description(), shares) : "");
  return stats.failed > 0 || failed_outputs > 0 ? 1 : 0;
}

RegisterCommand infer_command("infer", [](CLI::App& app) {
  app.description("Classify images with a trained checkpoint (tiling, normalisation, classes from its metadata)");
  auto a = std::make_shared<InferArgs>();
  app.add_option("images", a->inputs, "image files or folders (searched recursively)")->required();
  app.add_option("--checkpoint", a->checkpoint, "a bigtrain checkpoint (.safetensors)")->required();
  app.add_flag("--json", a->json, "one JSON object per image and line");
  app.add_option("--heatmap", a->heatmap,
                 "tile heatmap: OUT.png (over a thumbnail) or OUT.tif (pyramidal BigTIFF); several images: OUT_<stem>.png");
  app.add_option("--heatmap-class", a->heatmap_class, "class whose tile probability the heatmap shows (mean/max "
                                                      "aggregators; default: the image's top class)");
  app.add_option("--tiles-csv", a->tiles_csv, "per-tile scores as CSV (several images: OUT_<stem>.csv)");
  app.add_option("--device", a->device, "cpu, cuda, or auto (cuda when a usable GPU is present)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}))
      ->capture_default_str();
  app.add_option("--device-index", a->device_index, "which GPU (`bigtrain devices`; mpirun ranks take their local one)")
      ->check(CLI::Range(0, 1024))
      ->capture_default_str();
  app.add_option("--tile", a->tile, "override the checkpoint's tile size");
  app.add_option("--overlap", a->overlap, "override the tile overlap");
  app.add_option("--border", a->border, "override the border policy (pad | drop | shift)");
  app.add_option("--level", a->level, "override the pyramid level read");
  app.add_option("--downsample", a->downsample, "override the downsampling of the read level");
  app.add_option("--min-foreground", a->min_foreground, "override background filtering (0: keep every tile)");
  app.add_option("--foreground", a->foreground, "dark | bright");
  app.add_option("--tile-batch", a->tile_batch, "tiles per forward pass (default: the training run's)");
  app.add_option("--threads", a->threads, "read/preprocess threads (0: all cores)");
  return std::function<int()>([a] {
    // Under mpirun: each rank classifies its share of the images (pipeline/infer/infer_shard.hpp).
    DistributedSession session;
    Communicator& comm = world();
    if (!comm.is_root()) {
      // Rank 0 prints every image's result and error; the others only warn.
      spdlog::set_level(spdlog::level::warn);
      spdlog::set_pattern(fmt::format("[%H:%M:%S rank {}] [%l] %v", comm.rank()));
    }
    try {
      return run_infer(*a, comm);
    } catch (const std::exception& error) {
      // The other ranks would wait in the gather: end the whole job now.
      if (comm.distributed()) comm.abort(error.what());
      throw;
    }
  });
});

}  // namespace
}  // namespace bigtrain::cli
