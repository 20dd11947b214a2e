#pragma once
// Image-level inference from a checkpoint: what `bigtrain infer` and `bigtrain eval`
// run, and the same per-image computation as the evaluation inside training
// (TwoPassStep::eval_batch + finish_eval), so their probabilities agree bit for bit.
//
// Everything the model needs comes from the checkpoint's metadata (see
// pipeline/engine/checkpoint.hpp and docs/checkpoints.md): architecture (`model`),
// aggregator, class names, normalisation and tiling (`tiler`, refined by the full
// `config` when the checkpoint has one). Callers may override the tiling.
//
// Images stream through the tile stream (TBB flow graph): the next image's tiles are
// read while the current one computes. An image that cannot be opened, planned or
// read gets an error of its own; the others still get their results.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/core/tensor.hpp"
#include "net/aggregator.hpp"
#include "net/model.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/image_plan.hpp"
#include "pipeline/data/preprocess.hpp"

namespace bigtrain {

struct LoadedCheckpoint {
  std::string path;
  std::vector<std::string> classes;
  TilerConfig tiler;
  std::vector<double> mean, std;  // normalisation after scaling pixels to [0, 1]
  std::int64_t max_value = 0;     // data.max_value of the training run (0: each image's own)
  std::int64_t tile_batch = 16;
  double label_smoothing = 0.0;   // of the training run, so eval losses match its own
  std::int64_t top_tiles = 0;      // aggregator.top_tiles of the training run
  std::unique_ptr<net::Model> model;
  std::unique_ptr<net::Aggregator> aggregator;

  Preprocessing preprocessing() const;
};

// Throws Error naming `path` and the problem (not a safetensors file, a missing or
// malformed metadata key, weights that do not fit the described architecture).
LoadedCheckpoint load_checkpoint_for_inference(const std::string& path);

struct InferenceItem {
  std::string path;
  int label = -1;  // class index when known (eval: loss); -1 otherwise
};

struct TileResult {
  cv::Rect rect;  // grid pixels of the plan's sampling
  // Attention weight (attention aggregator), else NaN.
  float attention = 0.0f;
  // softmax(head(h_i)): the head applied to this tile's feature alone.
  std::vector<float> class_scores;
};

struct ImagePrediction {
  std::size_t index = 0;  // into the items given to run()
  std::string path;
  std::string error;      // non-empty: this image failed, nothing else is set
  std::vector<float> probabilities;
  int top_class = -1;
  float loss = 0.0f;      // cross-entropy of the label (items with a label)
  std::int64_t tiles = 0;
  std::int64_t grid_tiles = 0;
  std::int64_t background_dropped = 0;
  double seconds = 0.0;   // from planning the image to its prediction
  std::shared_ptr<const ImagePlan> plan;  // kept only when tile results are asked for
  std::vector<TileResult> tile_results;   // idem

  bool ok() const { return error.empty(); }
};

struct InferenceOptions {
  Backend backend = Backend::cpu;
  std::int64_t tile_batch = 0;       // 0: the checkpoint's
  std::int64_t tiles_in_flight = 0;  // 0: the tile stream's default
  int threads = 0;                   // read/preprocess workers; 0: all cores
  bool tile_results = false;         // per-tile scores (heatmaps, tiles CSV)
};

struct InferenceStats {
  double seconds = 0.0;
  std::int64_t tiles = 0;
  std::int64_t images = 0;
  std::int64_t failed = 0;
  double wait_seconds = 0.0;  // the compute node waiting for tiles
};

class InferenceEngine {
 public:
  // The checkpoint's tiler is used unless `tiler` is given.
  InferenceEngine(LoadedCheckpoint& checkpoint, InferenceOptions options);

  TilerConfig& tiler() { return tiler_; }

  // Calls `on_result` once per item in item order (from one thread at a time), as
  // soon as its prediction (or error) is known.
  InferenceStats run(const std::vector<InferenceItem>& items,
                     const std::function<void(ImagePrediction&&)>& on_result);

 private:
  LoadedCheckpoint& checkpoint_;
  InferenceOptions options_;
  TilerConfig tiler_;
};

// Every image file under the given files and folders (folders recursively, sorted;
// files with an image extension). A path that does not exist stays in the list, so
// it gets its own error.
std::vector<std::string> expand_image_paths(const std::vector<std::string>& inputs);

}  // namespace bigtrain
