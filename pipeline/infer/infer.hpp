#pragma once
// Image-level inference from a checkpoint: what `bigtrain infer` and `bigtrain eval`
// run, and the same per-image computation as the evaluation inside training
// (TwoPassStep::eval_batch + finish_eval), so their probabilities agree bit for bit.
//
// Everything the model needs comes from the checkpoint's metadata
// (pipeline/engine/checkpoint_metadata.hpp, docs/checkpoints.md): architecture,
// aggregator, class names, normalisation and tiling. Callers' overrides of the tiling
// are applied to it, and checked, before anything is built.
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
#include "pipeline/data/image_tiling.hpp"
#include "pipeline/data/preprocess.hpp"
#include "pipeline/engine/checkpoint_metadata.hpp"

namespace bigtrain {

// The checkpoint's metadata (with the caller's tiling overrides applied) and the
// network built from it, its weights loaded.
struct LoadedCheckpoint : CheckpointMetadata {
  std::string path;
  std::unique_ptr<net::Model> model;
  std::unique_ptr<net::Aggregator> aggregator;

  Preprocessing preprocessing() const;
};

// Throws Error naming `path` and the problem (not a safetensors file, a missing or
// malformed metadata key, a tiling the overrides make invalid, weights that do not
// fit the described architecture).
LoadedCheckpoint load_checkpoint_for_inference(const std::string& path,
                                               const std::vector<TilerOverride>& tiler_overrides = {});

struct InferenceItem {
  std::string path;
  int label = -1;  // class index when known (eval: loss); -1 otherwise
};

struct TileResult {
  cv::Rect rect;  // grid pixels of the plan's sampling (tiler.mode stream: a feature map cell's pixels)
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
  std::shared_ptr<const ImageTiling> plan;  // kept only when tile results are asked for
  std::vector<TileResult> tile_results;   // idem

  bool ok() const { return error.empty(); }
};

struct InferenceOptions {
  Backend backend = Backend::cpu;
  std::int64_t tile_batch = 0;       // 0: the checkpoint's
  std::int64_t tiles_in_flight = 0;  // 0: the tile stream's default
  int threads = 0;                   // read/preprocess workers; 0: all cores
  bool tile_results = false;         // per-tile scores (heatmaps, tiles CSV)
  // What an out-of-memory error says the run was doing (a string literal).
  const char* memory_phase = "inference";
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
  InferenceEngine(LoadedCheckpoint& checkpoint, InferenceOptions options);

  // Calls `on_result` once per item in item order (from one thread at a time), as
  // soon as its prediction (or error) is known.
  InferenceStats run(const std::vector<InferenceItem>& items,
                     const std::function<void(ImagePrediction&&)>& on_result);

 private:
  // tiler.mode stream: each image's trunk over the whole image (pipeline/engine/stream_step.hpp);
  // tile results are the feature map's cells.
  InferenceStats run_streamed(const std::vector<InferenceItem>& items,
                              const std::function<void(ImagePrediction&&)>& on_result);

  LoadedCheckpoint& checkpoint_;
  InferenceOptions options_;
};

// Every image file under the given files and folders (folders recursively, sorted;
// files with an image extension). A path that does not exist stays in the list, so
// it gets its own error.
std::vector<std::string> expand_image_paths(const std::vector<std::string>& inputs);

}  // namespace bigtrain
