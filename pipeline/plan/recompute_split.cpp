#include "pipeline/plan/recompute_split.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "pipeline/plan/plan_units.hpp"

#ifdef BIGTRAIN_HAVE_CUDA
#include "kernels/cuda/device_info.hpp"
#endif

namespace bigtrain {
namespace {

// MemAvailable: what the kernel can hand out without swapping, page cache included.
std::size_t host_available_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key;
    std::size_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return 0;  // unknown: keep nothing rather than guess
}

}  // namespace

RecomputeSplit recompute_split(const TrainingPlan& plan, std::size_t budget) {
  RecomputeSplit split;
  split.budget = budget;
  split.recompute_peak = plan.step.peak;
  split.kept_per_batch = plan.step.kept_activations;
  const PlanInputs& in = plan.inputs;
  if (in.mode == TilerMode::stream)
    split.nothing_kept_because = "tiler.mode stream recomputes each streaming tile by design";
  else if (single_pass(in))
    split.nothing_kept_because = "the instance vote trains in one pass";
  else if (in.top_tiles > 0)
    split.nothing_kept_because = "aggregator.top_tiles: pass 2 trains only the selected tiles";
  if (!split.nothing_kept_because.empty() || split.kept_per_batch == 0 || budget <= split.recompute_peak) return split;
  split.kept_batches = static_cast<std::int64_t>((budget - split.recompute_peak) / split.kept_per_batch);
  return split;
}

std::size_t resolve_memory_budget(const Config& config, Backend backend, std::string* source) {
  if (config.train.memory_budget_bytes) {
    if (source) *source = fmt::format("train.memory_budget {}", config.train.memory_budget);
    return *config.train.memory_budget_bytes;
  }
  std::size_t available = 0;
  std::string what;
  if (backend == Backend::cuda) {
    if (config.device.memory_limit_bytes != 0) {
      available = config.device.memory_limit_bytes;
      what = fmt::format("device.memory_limit {}", config.device.memory_limit);
    } else {
      what = "the GPU's memory";
#ifdef BIGTRAIN_HAVE_CUDA
      try {
        available = cuda::device_properties(static_cast<int>(config.device.index)).total_memory;
      } catch (const Error& error) {
        what = fmt::format("the GPU's memory, unknown here: {}", error.what());
      }
#endif
    }
  } else {
    available = host_available_bytes();
    what = "MemAvailable";
  }
  if (source)
    *source = fmt::format("train.memory_budget auto, half of {} {}", what, format_bytes(available));
  return available / 2;
}

namespace {

struct ImageSplit {
  std::int64_t batches = 0, kept_batches = 0, recomputed_tiles = 0;
  double flops = 0.0;  // a step's, with the kept batches not recomputed
};

ImageSplit image_split(const TrainingPlan& plan, const RecomputeSplit& split) {
  ImageSplit s;
  const ImageFigures& image = *plan.image;
  const std::int64_t batch = std::max<std::int64_t>(plan.tile_batch, 1);
  s.batches = (image.tiles + batch - 1) / batch;
  s.kept_batches = std::min(s.batches, split.kept_batches);
  const std::int64_t kept = kept_tiles(split, batch, image.tiles);
  s.recomputed_tiles = image.trained_tiles - std::min(kept, image.trained_tiles);
  const double per_tile_forward =
      image.trained_tiles > 0 ? image.pass2_forward_flops / static_cast<double>(image.trained_tiles) : 0.0;
  s.flops = image.tiled_flops - per_tile_forward * static_cast<double>(image.trained_tiles - s.recomputed_tiles);
  return s;
}

}  // namespace

std::string format_recompute_split(const TrainingPlan& plan, const RecomputeSplit& split) {
  std::string out = fmt::format("Recompute ({}: {}):\n", split.budget_source.empty() ? "budget" : split.budget_source,
                                format_bytes(split.budget));
  if (!split.nothing_kept_because.empty())
    return out + fmt::format("  pass 2 recomputes every tile: {}\n", split.nothing_kept_because);
  out += fmt::format("  a step recomputing every batch peaks at {}; each kept tile batch adds {}\n",
                     format_bytes(split.recompute_peak), format_bytes(split.kept_per_batch));
  out += fmt::format("  pass 1 keeps the activations of up to {} tile batch(es) per image\n", split.kept_batches);
  if (plan.image) {
    const ImageSplit s = image_split(plan, split);
    const ImageFigures& image = *plan.image;
    out += fmt::format(
        "  this image: {} of {} batches kept, pass 2 recomputes {} of {} tiles; {} per step ({:.2f}x the whole "
        "image's, {:.2f}x without keeping)\n",
        s.kept_batches, s.batches, s.recomputed_tiles, image.trained_tiles, format_flops(s.flops),
        s.flops / image.whole_image_flops, image.tiled_flops / image.whole_image_flops);
  }
  return out;
}

nlohmann::json to_json(const TrainingPlan& plan, const RecomputeSplit& split) {
  nlohmann::json out = {{"budget_bytes", split.budget},
                        {"budget_source", split.budget_source},
                        {"recompute_peak_bytes", split.recompute_peak},
                        {"kept_bytes_per_batch", split.kept_per_batch},
                        {"kept_batches_per_image", split.kept_batches},
                        {"nothing_kept_because", split.nothing_kept_because}};
  if (plan.image && split.nothing_kept_because.empty()) {
    const ImageSplit s = image_split(plan, split);
    out["image"] = {{"batches", s.batches},
                    {"kept_batches", s.kept_batches},
                    {"recomputed_tiles", s.recomputed_tiles},
                    {"flops", s.flops}};
  }
  return out;
}

}  // namespace bigtrain
