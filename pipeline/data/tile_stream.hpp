#pragma once
// The TBB flow graph that feeds tiles to the network (docs/design.md, section 3):
//
//   input_node (serial: takes each image's plan, emits one request per tile, in order)
//     -> planning node (serial: plans the next `plan_ahead` images while this one streams)
//     -> limiter_node (at most `tiles_in_flight` tiles between input and compute)
//     -> function_node read + preprocess/augment (parallel, thread-safe region reads)
//     -> sequencer_node (back into request order)
//     -> function_node batching + compute (serial: the device step)
//
// A schedule is a list of jobs; a job is one pass over one image's tiles (training:
// pass 1 then pass 2 of each image; evaluation: one pass). Tiles of the next job are
// read while the current one computes, and pass 2's batches are exactly pass 1's:
// same plan, same tiles, same per-tile augmentation seeds, same batch boundaries.
// A job may skip its first batches and run the others in reverse (StreamJob); a job
// left with no tile emits no batch.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/core/tensor.hpp"
#include "pipeline/data/image_tiling.hpp"
#include "pipeline/data/preprocess.hpp"

namespace bigtrain {

struct StreamJob {
  std::size_t image = 0;  // caller's image index (the planner's argument)
  int pass = 0;           // caller's meaning (1 and 2 in training, 0 in evaluation)
  // Pass 2 under train.memory_budget (pipeline/engine/two_pass.hpp): the job's batches
  // come last batch first, so parameter gradients accumulate in one order whichever
  // batches pass 1 kept, and the first `skip_batches` batches are not read at all
  // (their activations are still held). Batch boundaries stay those of pass 1.
  bool reverse_batches = false;
  std::int64_t skip_batches = 0;
  // When set, the batches to skip of an image of `tiles` tiles, in place of
  // skip_batches (the budget's split depends on the image's tile count).
  std::function<std::int64_t(std::int64_t tiles)> skip_batches_of = nullptr;
};

struct TileBatch {
  std::size_t job = 0;  // index into the schedule
  std::size_t image = 0;
  int pass = 0;
  std::shared_ptr<const ImageTiling> plan;
  std::int64_t first_tile = 0;  // rows [first_tile, first_tile + pixels.dim(0)) of the image
  bool last_of_job = false;     // the job's last batch (its lowest-numbered with reverse_batches)
  Tensor pixels;  // host float32 [B, C, T, T]
};

struct StreamStats {
  double seconds = 0.0;          // the whole run
  double compute_seconds = 0.0;  // inside the consumer
  double wait_seconds = 0.0;     // the consumer idle, waiting for tiles
  std::int64_t tiles = 0;
  std::int64_t batches = 0;
  std::int64_t most_tiles_in_flight = 0;  // read or being read, not yet released by compute
};

struct TileStreamOptions {
  std::int64_t tile_batch = 16;
  std::int64_t tiles_in_flight = 0;  // 0: 4 batches; at least 2 batches
  int threads = 0;                   // read/preprocess workers; 0: all cores
  // Images planned ahead of the one streaming (opening, thumbnail, background
  // filter), so planning overlaps reads and compute instead of stalling the input.
  // 0 plans each image in the input node when the stream reaches it.
  int plan_ahead = 2;
};

class TileStream {
 public:
  // The planner is called once per image; later jobs of the same image reuse its
  // plan. With plan_ahead = 0 it is called from the input node when the stream
  // reaches the image's first job. Otherwise it is called on a worker thread up to
  // plan_ahead images earlier, possibly while the consumer runs and while another
  // image is being planned, so it must be thread-safe (image_tiling is). Either way a
  // planner's error surfaces when the stream reaches that image, as if planned then.
  using Planner = std::function<ImageTiling(std::size_t image)>;
  // Called for each batch in schedule order, from one thread at a time.
  using Consumer = std::function<void(const TileBatch& batch)>;

  TileStream(TileStreamOptions options, Preprocessing preprocessing);

  // Runs the schedule to the end. An exception from the planner, a read or the
  // consumer stops the stream and is rethrown here, the image's path prepended.
  StreamStats run(const std::vector<StreamJob>& schedule, const Planner& planner, const Consumer& consumer);

  std::int64_t tiles_in_flight() const { return tiles_in_flight_; }

 private:
  TileStreamOptions options_;
  Preprocessing preprocessing_;
  std::int64_t tiles_in_flight_;
};

}  // namespace bigtrain
