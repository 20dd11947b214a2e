#pragma once
// `bigtrain plan`: what a configured run will cost before it runs. Per layer of the
// encoder the output shape, activation and parameter bytes and FLOPs; the peak
// memory of one two-pass training step (pipeline/engine/two_pass.hpp) for one tile batch;
// the peak the same network would need trained on the whole image at batch 1; the
// FLOPs per image of tiled training (overlap, border padding and pass 2's
// recomputation included) against whole-image training; and the largest tile batch
// and tile size that fit a memory budget.
//
// Memory comes from net/memory_plan's walk of the real layers, each describing
// what its calls allocate (rounded as the caching allocator rounds), so the
// prediction is checked against the allocator's measured peak (tests/pipeline/plan_test.cpp). It is device
// memory as the allocator counts it: the CUDA context, cuDNN/cuBLAS handles and
// library code are outside it, and printed beside it as kCudaRuntimeBytes.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/core/device.hpp"
#include "net/aggregator.hpp"
#include "net/memory_plan.hpp"
#include "net/model_spec.hpp"
#include "net/streaming_memory.hpp"
#include "pipeline/config/config.hpp"

namespace bigtrain {

// Device memory a CUDA run holds outside the allocator: the context, the cuDNN and
// cuBLAS handles and the library kernels they load. Measured by scripts/gpu_check
// (the driver's per-process use, sampled every 0.5 s, minus the allocator's peak
// reserved bytes) on an H200, driver 580.159, CUDA 13.0, cuDNN 9 with lazy module
// loading, training ResNet-50 in float32: 600 MiB (2026-12-04). Other cards and
// drivers differ by tens of MiB; the plan adds it to the allocator's peak for the
// card total, and device.memory_limit does not cover it.
inline constexpr std::size_t kCudaRuntimeBytes = std::size_t{600} << 20;

// Everything of a run that changes its memory and FLOPs.
struct PlanInputs {
  net::ModelSpec model;
  net::AggregatorSpec aggregator;
  std::int64_t top_tiles = 0;  // aggregator.top_tiles: pass 2 computes only these tiles
  net::OptimizerKind optimizer = net::OptimizerKind::adamw;
  double momentum = 0.9;
  bool freeze_bn = false;
  DType compute_dtype = DType::f32;  // train.precision: the encoder's convolutions' operands
  TilerMode mode = TilerMode::tiles;
  std::int64_t tile = 256;
  std::int64_t overlap = 0;
  tiler::BorderPolicy border = tiler::BorderPolicy::pad;
  double downsample = 1.0;
  std::int64_t resize_size = 224;
  std::int64_t tile_batch = 16;
  std::int64_t tiles_in_flight = 0;  // 0: 4 tile batches (the tile stream's default)
  Backend backend = Backend::cpu;
  std::size_t cudnn_workspace = std::size_t{256} << 20;  // train.cudnn_workspace (CUDA)
  // Image size as read at the configured level, before `downsample`; unset: no image figures.
  std::optional<std::int64_t> image_width, image_height;
};

// The inputs of a config file (model, aggregator, optimizer, tiler, tile batch);
// `backend` is where the memory is planned.
PlanInputs plan_inputs_from_config(const Config& config, Backend backend);

// Peak of one step, split by what holds the memory at that moment.
struct StepMemory {
  std::size_t parameters = 0;       // weights of encoder, aggregator and head, with BatchNorm running statistics
  std::size_t gradients = 0;        // one per parameter (zeroed by the optimizer before the step)
  std::size_t optimizer_state = 0;  // AdamW: exp_avg + exp_avg_sq; SGD: momentum buffer
  std::size_t workspace = 0;        // CUDA: the shared cuDNN workspace (its limit, an upper bound)
  std::size_t activations = 0;      // the rest at the peak: input batches, kept activations, their
                                    // gradients, kernel temporaries, tile features H and dL/dH
  std::size_t peak = 0;             // the sum
  std::string peak_phase;           // where the replay reached its peak ("pass 2 backward layer1.0.conv1")
  std::size_t features = 0;         // of which tile features and their gradients (2 x N x D floats)
  std::size_t kept_activations = 0; // activations one tile batch keeps for backward
};

struct ImageFigures {
  std::int64_t width = 0, height = 0;  // the grid's image (after downsample)
  std::int64_t grid_cols = 0, grid_rows = 0, tiles = 0;
  // Pixels the encoder sees per image over the image's own pixels (overlap and padding).
  double pixel_ratio = 0.0;
  // Passes over the image's tiles a step makes: 2 (pass 1 scores every tile, pass 2
  // trains `trained_tiles`: all of them, or aggregator.top_tiles), or 1 for the
  // instance vote without top_tiles (every tile trained with the label in one pass;
  // pass1_forward_flops is then 0 and pass 2's fields count the one pass).
  int passes = 2;
  std::int64_t trained_tiles = 0;
  double pass1_forward_flops = 0.0, pass2_forward_flops = 0.0, pass2_backward_flops = 0.0;
  double tiled_flops = 0.0;        // the three above
  double whole_image_flops = 0.0;  // forward + backward of the whole image at batch 1
  net::EncoderPlan whole_image_encoder;
  StepMemory whole_image;          // peak training on the whole image at batch 1
};

struct BudgetFigures {
  std::size_t budget = 0;
  std::int64_t max_tile_batch = 0;  // at the configured tile size (0: not even one tile fits)
  std::int64_t max_tile = 0;        // largest multiple of 32 at the configured tile batch (0: none)
  struct Row {
    std::int64_t tile = 0;
    std::int64_t max_batch = 0;
  };
  std::vector<Row> batch_by_tile;  // common tile sizes and the largest batch of each
};

// tiler.mode stream (net/streaming.hpp): the trunk over the whole image tile by tile.
struct StreamFigures {
  std::int64_t tiles = 0;          // streaming tiles of the image
  Shape largest_input;             // the largest tile read, halo included
  Shape feature_map;               // [1, C, h, w]
  std::int64_t stride = 0;         // the trunk's, per axis (y)
  std::int64_t halo_before = 0, halo_after = 0;  // pixels a cell reads beyond its own stride (y)
  double halo_overhead = 0.0;      // pixels read per forward over the image's pixels
  net::StreamMemory memory;        // one tile's step + the map and its gradient
};

struct TrainingPlan {
  PlanInputs inputs;
  std::int64_t tile = 0;      // input edge of one encoder pass (the tile, or resize_size)
  std::int64_t tile_batch = 0;
  std::int64_t tiles = 0;     // N for H and dL/dH: the image's tiles, else the tile batch
  net::EncoderPlan encoder;   // one tile batch
  StepMemory step;
  std::size_t host_tile_buffers = 0;  // tiles in flight in the tile stream (host memory)
  // CUDA: kCudaRuntimeBytes, beside the step's peak (0 on the CPU).
  std::size_t cuda_runtime = 0;
  std::optional<ImageFigures> image;
  std::optional<BudgetFigures> budget;
  // tiler.mode stream: `step` is then the streamed step (persistent memory + memory.step_peak).
  std::optional<StreamFigures> stream;
};

// Throws bigtrain::Error for an impossible setting (a tile smaller than the
// network's receptive field, a grid that cannot be laid out).
TrainingPlan plan_training(const PlanInputs& inputs, std::optional<std::size_t> memory_budget = std::nullopt);

// Peak of a training step on one image of `tiles` tiles in batches of `tile_batch`
// tiles of `tile` pixels (the last batch may be smaller): two passes, or the one pass
// of the instance vote without top_tiles (single_pass).
StepMemory plan_step_memory(const PlanInputs& inputs, std::int64_t tile, std::int64_t tile_batch,
                            std::int64_t tiles);

// Whether a step trains every tile in one pass (TwoPassStep::single_pass).
bool single_pass(const PlanInputs& inputs);

nlohmann::json to_json(const TrainingPlan& plan);
// The human report: per-layer table, step memory, image figures, budget.
std::string format_plan(const TrainingPlan& plan);

}  // namespace bigtrain
