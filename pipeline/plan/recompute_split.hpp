#pragma once
// train.memory_budget: how many of an image's tile batches pass 1 of a two-pass step
// keeps (their activations held until pass 2 ends), so that pass 2 recomputes only
// the rest (pipeline/engine/two_pass.hpp). The kept batches are an image's first;
// each holds what the plan's walk says one batch keeps for backward, on top of the
// peak of the step that recomputes everything.
#include <cstddef>
#include <cstdint>
#include <string>

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
  std::int64_t kept_batches = 0;    // per image, at most (the first ones)
  std::string nothing_kept_because; // set when the configuration cannot keep any
};

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

// Tiles pass 1 keeps for an image of `tiles` tiles: whole batches from the first.
inline std::int64_t kept_tiles(const RecomputeSplit& split, std::int64_t tile_batch, std::int64_t tiles) {
  return split.kept_batches * tile_batch >= tiles ? tiles : split.kept_batches * tile_batch;
}

}  // namespace bigtrain
