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
  split.batch_forward_flops = plan.encoder.forward_flops;
  split.tails = plan.encoder.tails;
  if (!split.nothing_kept_because.empty() || split.kept_per_batch == 0 || budget <= split.recompute_peak) return split;
  split.kept_batches = static_cast<std::int64_t>((budget - split.recompute_peak) / split.kept_per_batch);
  return split;
}

ImageKeep image_keep(const RecomputeSplit& split, std::int64_t tiles, std::int64_t tile_batch) {
  ImageKeep best;
  tile_batch = std::max<std::int64_t>(tile_batch, 1);
  best.batches = tiles > 0 ? (tiles + tile_batch - 1) / tile_batch : 0;
  if (!split.nothing_kept_because.empty() || split.kept_per_batch == 0 || split.budget <= split.recompute_peak ||
      best.batches == 0)
    return best;
  const std::size_t room = split.budget - split.recompute_peak;
  const auto batches = static_cast<std::size_t>(best.batches);
  // k whole batches and a tail of the other batches: k * whole + (batches - k) * tail <= room.
  auto consider = [&](std::size_t children, const std::string& first, std::size_t tail_bytes, double tail_flops) {
    if (tail_bytes >= split.kept_per_batch || batches * tail_bytes > room) return;
    const std::size_t whole = std::min(batches, (room - batches * tail_bytes) / (split.kept_per_batch - tail_bytes));
    const double saved = static_cast<double>(whole) * split.batch_forward_flops +
                         static_cast<double>(batches - whole) * tail_flops;
    if (saved <= best.saved_forward_flops) return;  // ties: the shorter tail, which keeps less
    best.kept_batches = static_cast<std::int64_t>(whole);
    best.tail_children = whole == batches ? 0 : children;
    best.tail_first = whole == batches ? std::string() : first;
    best.kept_bytes = whole * split.kept_per_batch + (batches - whole) * (whole == batches ? 0 : tail_bytes);
    best.saved_forward_flops = saved;
  };
  consider(0, {}, 0, 0.0);
  for (const net::EncoderPlan::Tail& tail : split.tails)
    consider(tail.children, tail.first, tail.kept_bytes, tail.forward_flops);
  return best;
}

const net::EncoderPlan::Tail* shortest_kept_tail(const RecomputeSplit& split) {
  const auto tail = std::find_if(split.tails.begin(), split.tails.end(),
                                 [](const net::EncoderPlan::Tail& t) { return t.kept_bytes > 0; });
  return tail == split.tails.end() ? nullptr : &*tail;
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
  ImageKeep keep;
  std::int64_t recomputed_tiles = 0;  // whose pass 2 runs (all of the encoder, or the front of a kept tail)
  double flops = 0.0;                 // a step's, less what pass 2 does not recompute
};

ImageSplit image_split(const TrainingPlan& plan, const RecomputeSplit& split) {
  ImageSplit s;
  const ImageFigures& image = *plan.image;
  const std::int64_t batch = std::max<std::int64_t>(plan.tile_batch, 1);
  s.keep = image_keep(split, image.tiles, batch);
  const std::int64_t kept = kept_tiles(s.keep, batch, image.tiles);
  s.recomputed_tiles = image.trained_tiles - std::min(kept, image.trained_tiles);
  // What pass 2 is spared, as a share of its forward over the image's batches (the
  // plan's figures are per full batch; the last may be short).
  const double all_batches = static_cast<double>(s.keep.batches) * split.batch_forward_flops;
  const double spared = all_batches > 0.0 ? std::min(1.0, s.keep.saved_forward_flops / all_batches) : 0.0;
  s.flops = image.tiled_flops - spared * image.pass2_forward_flops;
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
  out += fmt::format("  whole batches alone: pass 1 keeps up to {} tile batch(es) per image\n", split.kept_batches);
  // The tails from the shortest that keeps anything to the longest.
  const net::EncoderPlan::Tail* shortest = shortest_kept_tail(split);
  if (shortest != nullptr && split.batch_forward_flops > 0.0) {
    const net::EncoderPlan::Tail& longest = split.tails.back();
    out += fmt::format(
        "  or of every batch the encoder's last layers, per tile batch: from {} on {} ({:.1f}% of its forward) to "
        "from {} on {} ({:.1f}%); per image, the mix of whole batches and tail that spares pass 2 the most\n",
        shortest->first, format_bytes(shortest->kept_bytes), 100.0 * shortest->forward_flops / split.batch_forward_flops,
        longest.first, format_bytes(longest.kept_bytes), 100.0 * longest.forward_flops / split.batch_forward_flops);
  }
  if (plan.image) {
    const ImageSplit s = image_split(plan, split);
    const ImageFigures& image = *plan.image;
    const std::string tail =
        s.keep.tail_children > 0 ? fmt::format(", of the others the layers from {} on", s.keep.tail_first) : "";
    out += fmt::format(
        "  this image: {} of {} batches kept whole{} ({}); pass 2 runs {} of {} tiles; {} per step ({:.2f}x the "
        "whole image's, {:.2f}x without keeping)\n",
        s.keep.kept_batches, s.keep.batches, tail, format_bytes(s.keep.kept_bytes), s.recomputed_tiles,
        image.trained_tiles, format_flops(s.flops), s.flops / image.whole_image_flops,
        image.tiled_flops / image.whole_image_flops);
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
  nlohmann::json tails = nlohmann::json::array();
  for (const net::EncoderPlan::Tail& tail : split.tails)
    tails.push_back({{"first", tail.first},
                     {"children", tail.children},
                     {"kept_bytes_per_batch", tail.kept_bytes},
                     {"forward_flops_per_batch", tail.forward_flops}});
  out["tails"] = std::move(tails);
  if (plan.image && split.nothing_kept_because.empty()) {
    const ImageSplit s = image_split(plan, split);
    out["image"] = {{"batches", s.keep.batches},
                    {"kept_batches", s.keep.kept_batches},
                    {"kept_tail_children", s.keep.tail_children},
                    {"kept_tail_first", s.keep.tail_first},
                    {"kept_bytes", s.keep.kept_bytes},
                    {"recomputed_tiles", s.recomputed_tiles},
                    {"flops", s.flops}};
  }
  return out;
}

}  // namespace bigtrain
