#pragma once
// `bigtrain run`: tiled end-to-end training of one config into one run directory.
//
// Run directory: config.yaml (resolved), classes.json, metrics.csv (one row per
// epoch and split), confusion_<split>.csv, log.txt, checkpoints/{last,best}.safetensors
// and last.training.safetensors (weights, optimizer state and counters: all resume
// reads, see pipeline/engine/checkpoint.hpp).
//
// SIGINT/SIGTERM (pipeline/train/interrupt.hpp) stop the run after the optimizer step in
// progress with a checkpoint inside the epoch: it also holds the epoch's results so
// far, and resuming skips the images of the steps taken.
//
// Everything random derives from (train.seed, epoch, image, purpose): the epoch's
// image order, tile subsets, augmentation and dropout. So a run resumed from the
// checkpoint of epoch k (or of step s inside it) continues exactly as the
// uninterrupted run (on the CPU, bit for bit): it needs only the weights, the
// optimizer state, the epoch and step counts.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/core/device.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/dataset.hpp"
#include "pipeline/engine/metrics.hpp"

namespace bigtrain {

struct EpochSummary {
  std::int64_t epoch = 0;
  std::string split;  // train | val | test
  ClassificationMetrics metrics;
  double seconds = 0.0;
  std::int64_t tiles = 0;
  // Tiles read and encoded (0 when a frozen encoder's kept features served
  // the epoch: train.feature_cache_mb).
  std::int64_t tiles_encoded = 0;
  double wait_seconds = 0.0;  // the compute node waiting for tiles
  std::size_t peak_allocated_bytes = 0;
  std::int64_t peak_rss_bytes = 0;
  double learning_rate = 0.0;
  // CUDA runs only (empty in metrics.csv on the CPU): the device allocator's most in
  // use and most reserved from the system (what the card must have; device.memory_limit caps it).
  std::size_t device_peak_bytes = 0;
  std::size_t device_peak_reserved_bytes = 0;
};

struct TrainOutcome {
  std::vector<EpochSummary> rows;  // of this invocation
  std::int64_t epochs_completed = 0;
  std::optional<double> best_value;
  std::int64_t best_epoch = 0;
  bool stopped_early = false;
  // SIGINT/SIGTERM (or stop_after_optimizer_steps): the run stopped at an optimizer
  // step boundary with a checkpoint that --resume continues bit for bit (CPU).
  bool interrupted = false;
  int stop_signal = 0;     // the signal, 0 for stop_after_optimizer_steps
  std::string stopped_at;  // "epoch 2, optimizer step 3 of 4 (step 7 of the run)"
};

class Trainer {
 public:
  // resume: continue the run in config.output.dir from checkpoints/last.
  // backend: run on this backend instead of the one device.type selects; tests run
  // the reference backend, the one that computes fp16 and bf16 without a GPU.
  Trainer(Config config, bool resume, std::optional<Backend> backend = std::nullopt);
  ~Trainer();

  // Trains the remaining epochs, evaluating the validation split after each and the
  // test split at the end (with the best checkpoint when there is one).
  TrainOutcome run();
  // Stop after at most this many epochs in this invocation (tests of resume).
  void set_epoch_limit(std::int64_t epochs) { epoch_limit_ = epochs; }
  // Stop as SIGTERM would once the optimizer has taken this many steps in all
  // (tests of resuming inside an epoch at every step boundary).
  void stop_after_optimizer_steps(std::int64_t steps);

  const Dataset& dataset() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
  std::int64_t epoch_limit_ = -1;
};

}  // namespace bigtrain
