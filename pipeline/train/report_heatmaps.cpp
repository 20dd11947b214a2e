#include "pipeline/train/report_heatmaps.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "net/safetensors.hpp"
#include "pipeline/common/atomic_file.hpp"
#include "pipeline/distributed/distributed.hpp"
#include "pipeline/infer/heatmap.hpp"
#include "pipeline/infer/infer.hpp"
#include "pipeline/report/report.hpp"

namespace bigtrain {
namespace fs = std::filesystem;
namespace {

// Image stems become part of a file name embedded in HTML: keep them plain.
std::string safe_stem(const std::string& path) {
  std::string stem = fs::path(path).stem().string();
  for (char& c : stem)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '-';
  return stem.empty() ? "image" : stem.substr(0, 60);
}

// Only files this module names are ever removed: a user's own PNGs in heatmaps/ stay.
bool is_ours(const std::string& name) {
  return (name.rfind("val_correct_", 0) == 0 || name.rfind("val_wrong_", 0) == 0) && fs::path(name).extension() == ".png" &&
         name.find('/') == std::string::npos;
}

std::vector<std::string> previous_files(const fs::path& manifest) {
  std::vector<std::string> files;
  if (!fs::exists(manifest)) return files;
  try {
    std::ifstream in(manifest);
    std::stringstream text;
    text << in.rdbuf();
    for (const auto& h : parse_report_heatmaps_json(text.str(), manifest.string()).heatmaps) files.push_back(h.file);
  } catch (const std::exception& error) {
    spdlog::warn("{}: ignoring the previous heatmap list: {}", manifest.string(), error.what());
  }
  return files;
}

}  // namespace

std::vector<std::size_t> heatmap_scan_order(const std::vector<Sample>& val, std::size_t classes) {
  std::vector<std::vector<std::size_t>> by_class(std::max<std::size_t>(classes, 1));
  for (std::size_t i = 0; i < val.size(); ++i) {
    const auto label = static_cast<std::size_t>(std::max(val[i].label, 0));
    by_class[std::min(label, by_class.size() - 1)].push_back(i);
  }
  std::vector<std::size_t> order;
  for (std::size_t round = 0; order.size() < val.size(); ++round)
    for (const auto& members : by_class)
      if (round < members.size()) order.push_back(members[round]);
  return order;
}

ReportHeatmapSet write_report_heatmaps(const std::string& run_dir, const std::vector<Sample>& val, std::int64_t epoch,
                                       const ReportHeatmapOptions& options) {
  const fs::path dir = fs::path(run_dir) / "heatmaps";
  const fs::path checkpoint_path = fs::path(run_dir) / "checkpoints" / "best.safetensors";
  BT_CHECK(fs::exists(checkpoint_path), "{}: no best checkpoint to draw heatmaps with", checkpoint_path.string());
  LoadedCheckpoint checkpoint = load_checkpoint_for_inference(checkpoint_path.string());
  const bool attention = checkpoint.aggregator->kind() == net::AggregatorKind::attention;
  InferenceOptions inference;
  inference.backend = options.backend;
  inference.memory_phase = "heatmaps";
  inference.threads = options.threads;
  inference.tile_results = true;
  InferenceEngine engine(checkpoint, inference);

  ReportHeatmapSet set;
  set.epoch = epoch;
  set.validation_images = val.size();
  set.quantity = attention ? "attention" : "P(predicted class)";
  fs::create_directories(dir);
  const std::vector<std::size_t> order = heatmap_scan_order(val, checkpoint.classes.size());
  std::size_t correct = 0, wrong = 0;
  // Small chunks: stop classifying as soon as enough of both kinds were found.
  constexpr std::size_t kChunk = 4;
  for (std::size_t start = 0; start < order.size() && set.scanned < options.max_scanned &&
                              (correct < options.correct || wrong < options.wrong);
       start += kChunk) {
    std::vector<InferenceItem> items;
    for (std::size_t i = start; i < order.size() && items.size() < kChunk && set.scanned + items.size() < options.max_scanned; ++i)
      items.push_back({val[order[i]].path, val[order[i]].label});
    set.scanned += items.size();
    engine.run(items, [&](ImagePrediction&& p) {
      if (!p.ok()) {
        spdlog::warn("report heatmaps: {}", p.error);
        return;
      }
      const int label = items[p.index].label;
      const bool is_correct = p.top_class == label;
      std::size_t& count = is_correct ? correct : wrong;
      if (count >= (is_correct ? options.correct : options.wrong)) return;
      ++count;
      ReportHeatmap h;
      h.file = fmt::format("val_{}_{}_{}.png", is_correct ? "correct" : "wrong", count, safe_stem(p.path));
      h.image = p.path;
      h.true_class = label >= 0 && label < static_cast<int>(checkpoint.classes.size())
                         ? checkpoint.classes[static_cast<std::size_t>(label)]
                         : std::to_string(label);
      h.predicted_class = checkpoint.classes[static_cast<std::size_t>(p.top_class)];
      h.probability = p.probabilities[static_cast<std::size_t>(p.top_class)];
      h.tiles = p.tiles;
      h.correct = is_correct;
      write_heatmap_png((dir / h.file).string(), p, heatmap_values(p, checkpoint.classes, attention), options.max_side);
      set.heatmaps.push_back(std::move(h));
    });
  }
  // Correct ones first, each kind in the order found.
  std::stable_sort(set.heatmaps.begin(), set.heatmaps.end(),
                   [](const ReportHeatmap& a, const ReportHeatmap& b) { return a.correct > b.correct; });

  const fs::path manifest = dir / kReportHeatmapsManifest;
  const std::vector<std::string> old_files = previous_files(manifest);
  write_file_atomically(manifest.string(), report_heatmaps_json(set));
  std::set<std::string> kept;
  for (const auto& h : set.heatmaps) kept.insert(h.file);
  for (const auto& file : old_files)
    if (is_ours(file) && !kept.contains(file)) fs::remove(dir / file);
  return set;
}

ReportHeatmapSet redraw_report_heatmaps(const std::string& run_dir, const ReportHeatmapOptions& options) {
  const fs::path config_path = fs::path(run_dir) / "config.yaml";
  BT_CHECK(fs::exists(config_path), "{}: no config.yaml; is this a bigtrain run directory?", run_dir);
  const Config config = load_config(config_path.string());
  const Dataset dataset = load_dataset(config.data, config.train.seed);
  BT_CHECK(!dataset.val.empty(), "{}: the run has no validation split to draw heatmaps of", run_dir);
  const fs::path best = fs::path(run_dir) / "checkpoints" / "best.safetensors";
  BT_CHECK(fs::exists(best), "{}: no best checkpoint to draw heatmaps with", best.string());
  const net::Metadata metadata = net::read_safetensors(best).metadata;
  const auto epoch = metadata.find("epoch");
  BT_CHECK(epoch != metadata.end(), "{}: no `epoch` in the checkpoint's metadata", best.string());
  ReportHeatmapOptions with_threads = options;
  if (with_threads.threads == 0) with_threads.threads = static_cast<int>(config.device.threads);
  return write_report_heatmaps(run_dir, dataset.val, std::stoll(epoch->second), with_threads);
}

void refresh_report_heatmaps(const Config& config, const Dataset& dataset, std::int64_t epoch, Backend backend) {
  if (!world().is_root() || dataset.val.empty()) return;
  if (const char* off = std::getenv("BIGTRAIN_REPORT_HEATMAPS"); off && std::string(off) == "0") return;
  try {
    const auto start = std::chrono::steady_clock::now();
    ReportHeatmapOptions options;
    options.threads = static_cast<int>(config.device.threads);
    options.backend = backend;
    const ReportHeatmapSet set = write_report_heatmaps(config.output.dir, dataset.val, epoch, options);
    std::size_t wrong = 0;
    for (const auto& h : set.heatmaps) wrong += h.correct ? 0 : 1;
    spdlog::info("report heatmaps (best checkpoint, epoch {}): {} correct and {} wrong of {} validation images "
                 "classified, {:.1f} s",
                 epoch, set.heatmaps.size() - wrong, wrong, set.scanned,
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  } catch (const std::exception& error) {
    spdlog::warn("{}: could not draw the report's heatmaps: {}", config.output.dir, error.what());
  }
  update_run_outputs(config.output.dir, dataset);
}

}  // namespace bigtrain
