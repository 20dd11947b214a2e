// The measuring half of scripts/bench_stream: one training step of an encoder +
// 2-class head on one grey image, batch 1, its trunk streamed tile by tile
// (net/streaming.hpp) with frozen BatchNorm: streamed forward, global average
// pooling, fc, cross-entropy, streamed backward, SGD step.
//
//   bench_stream_cpp --preset resnet50 --height 2435 --width 2435 --tile 512 [--iters N] [--plan-only]
//   bench_stream_cpp --mode tiled --tile 512 --tile-batch 2 [--memory-budget 2GiB | --kept-batches K] [--precision bf16]
//
// Prints one JSON object: median seconds per step after warm-up, the allocator's
// peak, peak RSS, the halo overhead and the planner's step peak, and where the
// memory went phase by phase (memory_probe.hpp: resident set, the allocator's
// reserved and handed-out bytes, glibc's heap).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <spdlog/spdlog.h>

#include "kernels/core/allocator.hpp"
#include "kernels/core/host_allocator.hpp"
#include "kernels/core/error.hpp"
#include "kernels/core/memory_size.hpp"
#include "kernels/cross_entropy.hpp"
#include "net/global_avg_pool.hpp"
#include "net/model.hpp"
#include "net/optimizer.hpp"
#include "net/streaming.hpp"
#include "net/streaming_memory.hpp"
#include "pipeline/engine/two_pass.hpp"
#include "pipeline/plan/plan.hpp"
#include "pipeline/plan/recompute_split.hpp"
#include "memory_probe.hpp"

namespace bigtrain::bench {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

std::int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// CPU seconds in the kernel and page faults: what mapping fresh memory costs.
nlohmann::json process_times() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return {{"user_s", seconds(usage.ru_utime)}, {"system_s", seconds(usage.ru_stime)},
          {"minor_page_faults", usage.ru_minflt}};
}

// ResNet preset with 1 input channel and 2 classes, as PyTorch's side builds it.
net::ModelSpec grey_two_class(const std::string& preset) {
  net::ModelSpec spec;
  spec.encoder = net::EncoderSpec::preset_spec(preset);
  spec.encoder.in_channels = 1;
  spec.num_classes = 2;
  return spec;
}

std::int64_t parameter_bytes(const std::vector<net::Parameter*>& parameters) {
  std::int64_t bytes = 0;
  for (const net::Parameter* p : parameters) bytes += p->value.numel() * 4;
  return bytes;
}

// A deterministic image in [-1, 1): no data to read, the same pixels every run.
Tensor synthetic_image(std::int64_t height, std::int64_t width) {
  Tensor image = Tensor::empty({1, 1, height, width});
  float* x = image.f32();
  for (std::int64_t i = 0; i < image.numel(); ++i) x[i] = static_cast<float>((i * 2654435761u) % 1000) / 500.0f - 1.0f;
  return image;
}

// Seconds of each of `iters` steps after `warmup` untimed ones.
template <typename Step>
std::vector<double> time_steps(int warmup, int iters, Step&& step) {
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> seconds;
  for (int i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    step();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return seconds;
}

// What both modes report: timing, the allocator's and the process's memory, phase by phase.
nlohmann::json measured(const std::string& mode, const std::string& preset, const Tensor& image,
                        const std::vector<double>& seconds, const Allocator& allocator, MemoryProbe& probe,
                        std::int64_t parameters) {
  probe.stop();
  return {{"framework", "bigtrain"},
          {"mode", mode},
          {"preset", preset},
          {"height", image.dim(2)},
          {"width", image.dim(3)},
          {"median_s", median(seconds)},
          {"seconds", seconds},
          {"peak_alloc_bytes", allocator.stats().peak_bytes},
          {"peak_rss_bytes", peak_rss_bytes()},
          {"process", process_times()},
          {"sampled_peak_rss_bytes", probe.max_rss()},
          {"peak_reserved_bytes", probe.max_reserved()},
          {"parameter_bytes", parameters},
          {"memory_phases", probe.report()},
          {"threads", omp_get_max_threads()}};
}

nlohmann::json run(const std::string& preset, std::int64_t height, std::int64_t width, std::int64_t tile, int warmup,
                   int iters, bool plan_only) {
  const net::ModelSpec spec = grey_two_class(preset);
  const Backend backend = Backend::cpu;
  Allocator& allocator = allocator_for(Device::cpu());
  allocator.reset_peak();
  MemoryProbe probe(allocator);
  probe.begin("model");
  net::Model model(spec, /*seed=*/0);

  const std::int64_t parameters = parameter_bytes(model.parameters());
  probe.begin("image");
  const Tensor image = synthetic_image(height, width);
  Tensor labels = Tensor::empty({1}, DType::i32);
  labels.data<std::int32_t>()[0] = 1;

  net::ForwardContext ctx = net::ForwardContext::train(backend);
  ctx.freeze_bn = true;
  net::StreamingTrunk trunk(model.encoder());
  const net::StreamPlan plan = trunk.plan(image.shape(), tile, ctx);
  const net::StreamMemory planned =
      net::plan_stream_memory(model.encoder(), plan, net::KernelMemoryModel::for_backend(backend));
  if (plan_only)
    return {{"preset", preset}, {"tile", plan.tile}, {"tiles", plan.tiles.size()},
            {"halo_overhead", plan.halo_overhead()},
            {"largest_tile_input", fmt::format("{}x{}", plan.largest_input()[2], plan.largest_input()[3])},
            {"planned_step_peak_bytes", planned.step_peak}};
  net::TensorRegionReader reader(image);
  net::GlobalAvgPool pool("avgpool");
  auto optimizer = net::make_optimizer({.kind = net::OptimizerKind::sgd, .lr = 0.01, .weight_decay = 1e-4, .momentum = 0.9},
                                       model.parameters(), backend);
  auto step = [&] {
    probe.begin("forward");
    optimizer->zero_grad();
    Tensor map = trunk.forward(reader, plan, ctx);
    probe.begin("head");
    const Tensor logits = model.head().forward(pool.forward(map, ctx), ctx);
    map = {};
    Tensor dlogits = Tensor::empty(logits.shape());
    kernels::cross_entropy(backend, logits, labels, nullptr, {}, dlogits);
    const Tensor dmap = pool.backward(model.head().backward(dlogits));
    probe.begin("backward");
    trunk.backward(reader, plan, dmap, ctx);
    probe.begin("optimizer");
    optimizer->step();
    probe.begin("between steps");
  };
  const std::vector<double> seconds = time_steps(warmup, iters, step);
  nlohmann::json result = measured("stream", preset, image, seconds, allocator, probe, parameters);
  result.update({{"tile", plan.tile},
                 {"tiles", plan.tiles.size()},
                 {"halo_overhead", plan.halo_overhead()},
                 {"largest_tile_input", fmt::format("{}x{}", plan.largest_input()[2], plan.largest_input()[3])},
                 {"planned_step_peak_bytes", planned.step_peak}});
  return result;
}

// Tile origins along one side: every `tile` pixels, the last shifted to end at the
// border (tiler.border: shift), so every pixel is in a tile and no tile is padded.
std::vector<std::int64_t> tile_origins(std::int64_t side, std::int64_t tile) {
  std::vector<std::int64_t> origins;
  for (std::int64_t at = 0; at + tile < side; at += tile) origins.push_back(at);
  origins.push_back(std::max<std::int64_t>(side - tile, 0));
  return origins;
}

// What train.memory_budget decides for this step: the plan of the same run (model,
// mean aggregator, SGD with momentum, frozen BatchNorm, tiles without overlap whose
// last row and column shift inside the image, as tile_origins lays them out).
RecomputeSplit budget_split(const net::ModelSpec& spec, std::int64_t height, std::int64_t width, std::int64_t tile,
                            std::int64_t tile_batch, std::int64_t tiles, std::size_t budget, DType compute_dtype) {
  PlanInputs inputs;
  inputs.model = spec;
  inputs.aggregator = {.kind = net::AggregatorKind::mean};
  inputs.optimizer = net::OptimizerKind::sgd;
  inputs.momentum = 0.9;
  inputs.freeze_bn = true;
  inputs.compute_dtype = compute_dtype;
  inputs.tile = tile;
  inputs.overlap = 0;
  inputs.border = tiler::BorderPolicy::shift;
  inputs.tile_batch = tile_batch;
  inputs.backend = Backend::cpu;
  inputs.image_width = width;
  inputs.image_height = height;
  const TrainingPlan plan = plan_training(inputs, budget);
  BT_CHECK(plan.image && plan.image->tiles == tiles, "the plan lays out {} tiles where the bench reads {}",
           plan.image ? plan.image->tiles : 0, tiles);
  return recompute_split(plan, budget);
}

// The seeds' scenario the two-pass way (pipeline/engine/two_pass.hpp): the image's
// tiles, all of them, batch by batch through the encoder without kept activations
// (pass 1), the mean of their features through the head and the loss, then the
// same batches again keeping activations and backpropagating each batch's rows of
// dL/dH (pass 2); one SGD step. BatchNorm frozen, as PyTorch's side. The tiles are
// copied from the image in memory: this measures compute and memory, not reading.
// precision bf16 computes the encoder's convolutions in bf16 (train.precision);
// What pass 1 keeps, so that pass 2 recomputes only the rest: train.memory_budget's
// split as the plan decides it (whole batches and a tail of the encoder's last layers
// of the others) when memory_budget names one ("2GiB"), else kept_batches whole
// batches as given.
nlohmann::json run_tiled(const std::string& preset, std::int64_t height, std::int64_t width, std::int64_t tile,
                         std::int64_t tile_batch, const std::string& precision, std::int64_t kept_batches,
                         const std::string& memory_budget, int warmup, int iters) {
  BT_CHECK(precision == "fp32" || precision == "bf16", "unknown precision '{}'; valid: fp32, bf16", precision);
  const net::ModelSpec spec = grey_two_class(preset);
  const Backend backend = Backend::cpu;
  Allocator& allocator = allocator_for(Device::cpu());
  allocator.reset_peak();
  MemoryProbe probe(allocator);
  probe.begin("model");
  net::Model model(spec, /*seed=*/0);
  auto aggregator = net::make_aggregator({.kind = net::AggregatorKind::mean}, model.encoder().feature_dim(), 0);
  const ImageModel image_model{&model.encoder(), aggregator.get(), &model.head()};
  const std::int64_t parameters = parameter_bytes(image_model.parameters());

  probe.begin("image");
  const Tensor image = synthetic_image(height, width);
  const float* x = image.f32();
  std::vector<std::pair<std::int64_t, std::int64_t>> tiles;
  for (std::int64_t top : tile_origins(height, tile))
    for (std::int64_t left : tile_origins(width, tile)) tiles.emplace_back(top, left);
  const auto count = static_cast<std::int64_t>(tiles.size());
  const std::int64_t side_h = std::min(tile, height), side_w = std::min(tile, width);
  auto batch_of = [&](std::int64_t first) {
    const std::int64_t n = std::min(tile_batch, count - first);
    Tensor batch = Tensor::empty({n, 1, side_h, side_w});
    float* out = batch.f32();
    for (std::int64_t b = 0; b < n; ++b) {
      const auto [top, left] = tiles[static_cast<std::size_t>(first + b)];
      for (std::int64_t r = 0; r < side_h; ++r)
        std::copy_n(x + (top + r) * width + left, side_w, out + (b * side_h + r) * side_w);
    }
    return batch;
  };

  const DType compute_dtype = precision == "bf16" ? DType::bf16 : DType::f32;
  TwoPassStep two_pass(image_model, {.backend = backend, .freeze_bn = true, .encoder_compute_dtype = compute_dtype});
  std::optional<RecomputeSplit> split;
  ImageKeep keep;
  keep.kept_batches = kept_batches;
  if (!memory_budget.empty()) {
    split = budget_split(spec, height, width, tile, tile_batch, count, parse_memory_size(memory_budget), compute_dtype);
    keep = image_keep(*split, count, tile_batch);
    host_allocator().set_reserve_limit(split->budget);  // as `bigtrain train` does
  }
  const std::int64_t kept_tiles = std::min(count, keep.kept_batches * tile_batch);
  auto optimizer = net::make_optimizer({.kind = net::OptimizerKind::sgd, .lr = 0.01, .weight_decay = 1e-4, .momentum = 0.9},
                                       image_model.parameters(), backend);
  auto step = [&] {
    probe.begin("pass 1");
    image_model.zero_grad();
    two_pass.begin_image(count, /*label=*/1, /*dropout_seed=*/0, kept_tiles, keep.tail_children);
    for (std::int64_t first = 0; first < count; first += tile_batch) two_pass.pass1_batch(batch_of(first), first);
    probe.begin("head");
    two_pass.finish_image(1.0f);
    probe.begin("pass 2");
    for (std::int64_t first = ((count - 1) / tile_batch) * tile_batch; first >= kept_tiles; first -= tile_batch)
      two_pass.pass2_batch(batch_of(first), first);  // last batch first, as the tile stream feeds it
    two_pass.backward_kept();
    two_pass.end_image();
    probe.begin("optimizer");
    optimizer->step();
    probe.begin("between steps");
  };
  const std::vector<double> seconds = time_steps(warmup, iters, step);
  nlohmann::json result = measured("tiled", preset, image, seconds, allocator, probe, parameters);
  result.update({{"tile", tile},
                 {"tiles", count},
                 {"tile_batch", tile_batch},
                 {"precision", precision},
                 {"kept_tiles", kept_tiles},
                 {"kept_batches", keep.kept_batches},
                 {"kept_tail_children", keep.tail_children},
                 {"kept_tail_first", keep.tail_first},
                 {"recomputed_fraction",
                  static_cast<double>(count * side_h * side_w) / static_cast<double>(height * width)}});
  if (split)
    result.update({{"memory_budget_bytes", split->budget},
                   {"planned_recompute_peak_bytes", split->recompute_peak},
                   {"planned_kept_per_batch_bytes", split->kept_per_batch},
                   {"planned_kept_bytes", keep.kept_bytes}});
  return result;
}

}  // namespace
}  // namespace bigtrain::bench

int main(int argc, char** argv) {
  using namespace bigtrain::bench;
  CLI::App app("bigtrain streamed training step (run through scripts/bench_stream)");
  int warmup = 1, iters = 2, threads = 0;
  std::string preset = "resnet50";
  std::int64_t height = 2435, width = 2435, tile = 512;
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str();
  app.add_option("--iters", iters, "timed steps (the median is reported)")->capture_default_str();
  app.add_option("--threads", threads, "OpenMP threads (0: the default)");
  app.add_option("--preset", preset)->capture_default_str();
  app.add_option("--height", height)->capture_default_str();
  app.add_option("--width", width)->capture_default_str();
  app.add_option("--tile", tile, "streaming tile side in pixels")->capture_default_str();
  bool plan_only = false;
  app.add_flag("--plan-only", plan_only, "print the tile plan and the planned memory, run nothing");
  std::string mode = "stream";
  app.add_option("--mode", mode, "stream (the trunk over the whole image, tile by tile) | tiled (two-pass MIL "
                                 "over the image's tiles, scripts/bench_net --seeds)")
      ->check(CLI::IsMember({"stream", "tiled"}))
      ->capture_default_str();
  std::int64_t tile_batch = 2;
  app.add_option("--tile-batch", tile_batch, "tiles a batch in tiled mode")->capture_default_str();
  std::string precision = "fp32";
  app.add_option("--precision", precision, "tiled mode: fp32 | bf16 convolutions (bf16 needs AVX512_BF16)")
      ->capture_default_str();
  std::int64_t kept_batches = 0;
  auto* kept_option = app.add_option("--kept-batches", kept_batches,
                                     "tiled mode: tile batches whose activations pass 1 keeps")
                          ->capture_default_str();
  std::string memory_budget;
  app.add_option("--memory-budget", memory_budget,
                 "tiled mode: train.memory_budget (2GiB, ...): pass 1 keeps the batches the plan says fit")
      ->excludes(kept_option);
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  if (threads > 0) omp_set_num_threads(threads);
  try {
    const nlohmann::json result =
        mode == "tiled"
            ? run_tiled(preset, height, width, tile, tile_batch, precision, kept_batches, memory_budget, warmup, iters)
            : run(preset, height, width, tile, warmup, iters, plan_only);
    fmt::print("{}\n", result.dump());
  } catch (const std::exception& e) {
    fmt::print(stderr, "bench_stream: {}\n", e.what());
    return 1;
  }
  return 0;
}
