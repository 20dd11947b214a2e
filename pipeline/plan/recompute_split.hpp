#pragma once
// train.memory_budget: what pass 1 of a two-pass step keeps of an image (held until
// pass 2 ends) so that pass 2 recomputes only the rest (pipeline/engine/two_pass.hpp):
// whole tile batches, the image's first, each holding what the plan's walk says one
// batch keeps for backward, and of the other batches the encoder's last layers (the
// kept tail), on top of the peak of the step that recomputes everything. Per image,
// the mix that leaves pass 2 the fewest FLOPs: the deep layers' activations are small
// for their FLOPs, so under a tight budget a tail of every batch saves more than
// whole batches, and the image's tile count decides how long a tail fits.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/core/device.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/plan/plan.hpp"

namespace bigtrain {

struct RecomputeSplit {
  std::size_t budget = 0;
  std::string budget_source;        // "train.memory_budget" or how "auto" was resolved
  std::size_t recompute_peak = 0;   // the step's peak when every batch is recomputed
  std::size_t kept_per_batch = 0;   // what one full tile batch keeps for backward
  std::int64_t kept_batches = 0;    // per image, at most (the first ones), keeping no tail
  std::string nothing_kept_because; // set when the configuration cannot keep any
  double batch_forward_flops = 0.0; // one full tile batch's encoder forward
  std::vector<net::EncoderPlan::Tail> tails;  // the plan's, shortest first
};

// What pass 1 keeps of one image: its first kept_batches batches whole, of the
// others the encoder's last tail_children children (0: none).
struct ImageKeep {
  std::int64_t batches = 0, kept_batches = 0;
  std::size_t tail_children = 0;
  std::string tail_first;            // the tail's first layer ("layer4.0")
  std::size_t kept_bytes = 0;        // all of it, at its largest (after pass 1)
  double saved_forward_flops = 0.0;  // what pass 2 does not recompute
};
ImageKeep image_keep(const RecomputeSplit& split, std::int64_t tiles, std::int64_t tile_batch);

// The shortest tail that keeps anything (the cheapest a budget can hold), or nullptr.
const net::EncoderPlan::Tail* shortest_kept_tail(const RecomputeSplit& split);

// The split for `plan` under `budget` bytes. Nothing is kept where pass 2 does not
// train every tile (aggregator.top_tiles, the instance vote) or there is no pass 2
// of tile batches (tiler.mode stream).
RecomputeSplit recompute_split(const TrainingPlan& plan, std::size_t budget);

// train.memory_budget in bytes: the configured size, or for "auto" half of what is
// available when the run starts (CPU: MemAvailable of /proc/meminfo; CUDA:
// device.memory_limit, else the card's memory). `source` says which.
std::size_t resolve_memory_budget(const Config& config, Backend backend, std::string* source = nullptr);

// The plan's report of the split: the budget, the batches kept per image and, with
// the plan's image, the batches of that image kept and the FLOPs a step then costs.
std::string format_recompute_split(const TrainingPlan& plan, const RecomputeSplit& split);
nlohmann::json to_json(const TrainingPlan& plan, const RecomputeSplit& split);

// Tiles whose batches pass 1 keeps whole, of an image of `tiles` tiles.
inline std::int64_t kept_tiles(const ImageKeep& keep, std::int64_t tile_batch, std::int64_t tiles) {
  return keep.kept_batches * tile_batch >= tiles ? tiles : keep.kept_batches * tile_batch;
}

}  // namespace bigtrain
