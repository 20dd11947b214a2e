#include "pipeline/plan/plan.hpp"

#include <algorithm>
#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "net/streaming.hpp"
#include "pipeline/config/specs.hpp"
#include "pipeline/plan/plan_units.hpp"
#include "tiler/tile_grid.hpp"

namespace bigtrain {

using net::MemoryTrace;
using net::MemoryWalk;
using net::PlannedTensor;

PlanInputs plan_inputs_from_config(const Config& config, Backend backend) {
  PlanInputs in;
  in.model = model_spec(config);
  if (!config.data.classes.empty()) in.model.num_classes = static_cast<std::int64_t>(config.data.classes.size());
  in.aggregator = aggregator_spec(config.aggregator);
  in.top_tiles = config.aggregator.top_tiles;
  in.optimizer = config.train.optimizer;
  in.momentum = config.train.momentum;
  in.freeze_bn = config.train.freeze_bn;
  in.compute_dtype = config.train.precision;
  in.mode = config.tiler.mode;
  in.tile = config.tiler.tile;
  in.overlap = config.tiler.overlap;
  in.border = config.tiler.border;
  in.downsample = config.tiler.downsample;
  in.resize_size = config.tiler.resize_size;
  in.tile_batch = config.train.tile_batch;
  in.tiles_in_flight = config.device.tiles_in_flight;
  in.backend = backend;
  in.cudnn_workspace = config.train.cudnn_workspace_bytes;
  return in;
}

bool single_pass(const PlanInputs& in) {
  return in.aggregator.kind == net::AggregatorKind::instance && in.top_tiles == 0;
}

namespace {

// Input batches on the device while one computes: the CUDA trainer uploads batch
// k+1 while batch k computes (kernels/cuda/context.hpp's upload_async); on the CPU
// the batch is the tile stream's host tensor itself.
int device_batches(Backend backend) { return backend == Backend::cuda ? 2 : 1; }

// A training pass through the encoder as the trainer runs it (the aggregator and
// head stay float32 whatever train.precision).
net::ForwardContext encoder_training(const PlanInputs& in) {
  net::ForwardContext ctx = net::ForwardContext::train(in.backend);
  ctx.freeze_bn = in.freeze_bn;
  ctx.compute_dtype = in.compute_dtype;
  return ctx;
}

net::KernelMemoryModel kernel_model(const PlanInputs& in) {
  net::KernelMemoryModel kernels = net::KernelMemoryModel::for_backend(in.backend);
  kernels.cuda_workspace_limit = in.cudnn_workspace;
  return kernels;
}

struct Persistent {
  std::size_t parameters = 0, gradients = 0, optimizer_state = 0, workspace = 0;
};

Persistent persistent_memory(const PlanInputs& in, const std::vector<net::Layer*>& layers,
                             const net::KernelMemoryModel& kernels) {
  Persistent p;
  const int slots = net::optimizer_slots(in.optimizer, in.momentum);
  for (net::Layer* layer : layers) {
    const net::ParameterMemory m = net::parameter_memory(*layer);
    p.parameters += m.values + m.buffers;
    p.gradients += m.gradients;
    p.optimizer_state += static_cast<std::size_t>(slots) * m.optimizer_slot;
  }
  if (kernels.backend == Backend::cuda) p.workspace = kernels.cuda_workspace_limit;
  return p;
}

StepMemory finish(const Persistent& p, const MemoryTrace& trace) {
  StepMemory m;
  m.parameters = p.parameters;
  m.gradients = p.gradients;
  m.optimizer_state = p.optimizer_state;
  m.workspace = p.workspace;
  m.activations = trace.peak();
  m.peak = p.parameters + p.gradients + p.optimizer_state + p.workspace + trace.peak();
  m.peak_phase = trace.peak_phase();
  return m;
}

// The layers training builds, walked by the planner: parameters allocated (their
// bytes are what the plan counts) but never initialised, activations never allocated.
struct PlannedModel {
  net::Encoder encoder;
  std::unique_ptr<net::Aggregator> aggregator;
  net::Linear head;

  explicit PlannedModel(const PlanInputs& in)
      : encoder(in.model.encoder, std::nullopt),
        aggregator(net::make_aggregator(in.aggregator, in.model.encoder.feature_dim(), 0)),
        head("fc", in.model.encoder.feature_dim(), in.model.num_classes, std::nullopt) {}
};

// Peak of a training step (pipeline/engine/two_pass.cpp, call by call).
StepMemory step_memory(PlannedModel& model, const PlanInputs& in, std::int64_t tile, std::int64_t tile_batch,
                       std::int64_t tiles) {
  BT_CHECK(tile_batch > 0 && tiles > 0, "plan: tile batch {} and tile count {} must be positive", tile_batch, tiles);
  const net::KernelMemoryModel kernels = kernel_model(in);
  const std::int64_t features = in.model.encoder.feature_dim();
  const std::int64_t batch = std::min(tile_batch, tiles);
  const Shape input{batch, in.model.encoder.in_channels, tile, tile};
  const Persistent persistent = persistent_memory(in, {&model.encoder, model.aggregator.get(), &model.head}, kernels);

  net::ForwardContext pass1 = encoder_training(in);
  pass1.keep_activations = false;
  net::ForwardContext pass2 = pass1;
  pass2.keep_activations = true;
  const net::ForwardContext head = net::ForwardContext::train(in.backend);

  // The trace outlives the walk's tensors.
  MemoryTrace trace;
  MemoryWalk walk(trace, kernels);
  // TwoPassStep::begin_image: H [N, D].
  trace.set_prefix("");
  trace.set_phase("begin image");
  const PlannedTensor h = walk.allocate({tiles, features});
  auto uploads = [&] {
    std::vector<PlannedTensor> batches;
    for (int i = 0; i < device_batches(in.backend); ++i) batches.push_back(walk.allocate(input));
    return batches;
  };
  {  // Pass 1: features only; each batch's rows are copied into H.
    trace.set_prefix("pass 1 ");
    trace.set_phase("input");
    const std::vector<PlannedTensor> x = uploads();
    const PlannedTensor f = walk.run_forward(model.encoder, x.front(), pass1);
  }
  if (single_pass(in)) {
    {  // train_instances_batch: forward keeping activations, the head on each tile with
       // the image's label, backward through head and encoder; the rows kept in H.
      trace.set_prefix("single pass ");
      trace.set_phase("input");
      const std::vector<PlannedTensor> x = uploads();
      const PlannedTensor f = walk.run_forward(model.encoder, x.front(), pass2);
      const PlannedTensor logits = walk.run_forward(model.head, f, head);
      PlannedTensor targets = walk.allocate({batch}, DType::i32);
      targets = walk.allocate({batch}, DType::i32);  // .to(device): a copy
      const PlannedTensor dlogits = walk.allocate(logits.shape());
      const PlannedTensor df = walk.run_backward(dlogits);
      walk.run_backward(df);
    }
    {  // finish_image: the vote, the head over H without gradients.
      trace.set_prefix("vote ");
      const PlannedTensor tile_logits = walk.run_forward(model.head, h, net::ForwardContext::inference(in.backend));
    }
    StepMemory m = finish(persistent, trace);
    m.features = h.bytes();
    return m;
  }
  PlannedTensor dh;
  {  // finish_image: aggregator, head, loss, backward to dL/dH.
    trace.set_prefix("head ");
    const PlannedTensor z = walk.run_forward(*model.aggregator, h, head);
    const PlannedTensor logits = walk.run_forward(model.head, z, head);
    PlannedTensor targets = walk.allocate({1}, DType::i32);
    targets = walk.allocate({1}, DType::i32);  // .to(device): a copy
    const PlannedTensor dlogits = walk.allocate(logits.shape());
    const PlannedTensor probabilities = walk.allocate(logits.shape());
    const PlannedTensor dz = walk.run_backward(dlogits);
    dh = walk.run_backward(dz);
  }
  {  // Pass 2: recompute keeping activations, backward with the batch's rows of dL/dH.
    trace.set_prefix("pass 2 ");
    trace.set_phase("input");
    const std::vector<PlannedTensor> x = uploads();
    const PlannedTensor f = walk.run_forward(model.encoder, x.front(), pass2);
    walk.run_backward(dh.view({batch, features}));
  }
  StepMemory m = finish(persistent, trace);
  m.features = h.bytes() + dh.bytes();
  return m;
}

// The encoder's input edge: the tile, or the resized image in resize mode.
std::int64_t input_edge(const PlanInputs& in) { return in.mode == TilerMode::resize ? in.resize_size : in.tile; }

struct Grid {
  std::int64_t width = 0, height = 0, cols = 0, rows = 0, tiles = 0;
};

Grid image_grid(const PlanInputs& in, std::int64_t tile) {
  Grid g;
  const double factor = std::max(1.0, in.downsample);
  g.width = std::max<std::int64_t>(1, std::llround(static_cast<double>(*in.image_width) / factor));
  g.height = std::max<std::int64_t>(1, std::llround(static_cast<double>(*in.image_height) / factor));
  if (in.mode == TilerMode::resize) {
    g.cols = g.rows = g.tiles = 1;
    return g;
  }
  const tiler::TileGrid grid(g.width, g.height, static_cast<int>(tile), static_cast<int>(in.overlap), in.border);
  g.cols = grid.cols();
  g.rows = grid.rows();
  g.tiles = static_cast<std::int64_t>(grid.tiles().size());
  return g;
}

std::int64_t tiles_for(const PlanInputs& in, std::int64_t tile, std::int64_t tile_batch) {
  return in.image_width ? image_grid(in, tile).tiles : tile_batch;
}

// Peak bytes of `tile_batch` at `tile`, or nullopt when the tile is too small for
// the network or makes no grid.
std::optional<std::size_t> peak_or_none(PlannedModel& model, const PlanInputs& in, std::int64_t tile,
                                        std::int64_t tile_batch) {
  try {
    if (in.mode != TilerMode::resize && in.overlap >= tile) return std::nullopt;
    const std::int64_t tiles = tiles_for(in, tile, tile_batch);
    if (tiles <= 0) return std::nullopt;
    return step_memory(model, in, tile, std::min(tile_batch, tiles), tiles).peak;
  } catch (const Error&) {
    return std::nullopt;
  }
}

// Largest batch in [1, limit] whose step fits `budget` (peak grows with the batch).
std::int64_t max_batch(PlannedModel& model, const PlanInputs& in, std::int64_t tile, std::size_t budget,
                       std::int64_t limit) {
  auto fits = [&](std::int64_t batch) {
    const auto peak = peak_or_none(model, in, tile, batch);
    return peak && *peak <= budget;
  };
  if (!fits(1)) return 0;
  std::int64_t good = 1, bad = 2;
  while (bad <= limit && fits(bad)) good = bad, bad *= 2;
  if (bad > limit) {
    if (fits(limit)) return limit;
    bad = limit;
  }
  while (bad - good > 1) {
    const std::int64_t mid = good + (bad - good) / 2;
    (fits(mid) ? good : bad) = mid;
  }
  return good;
}

}  // namespace

StepMemory plan_step_memory(const PlanInputs& in, std::int64_t tile, std::int64_t tile_batch, std::int64_t tiles) {
  PlannedModel model(in);
  return step_memory(model, in, tile, tile_batch, tiles);
}

namespace {

// Whole-image training at batch 1, as net::Model::forward/backward would run it.
StepMemory whole_image_memory(PlannedModel& model, const PlanInputs& in, std::int64_t width, std::int64_t height) {
  const net::KernelMemoryModel kernels = kernel_model(in);
  const Persistent persistent = persistent_memory(in, {&model.encoder, &model.head}, kernels);
  MemoryTrace trace;
  MemoryWalk walk(trace, kernels);
  {
    const PlannedTensor x = walk.allocate({1, in.model.encoder.in_channels, height, width});
    const PlannedTensor f = walk.run_forward(model.encoder, x, encoder_training(in));
    const PlannedTensor logits = walk.run_forward(model.head, f, net::ForwardContext::train(in.backend));
    const PlannedTensor dlogits = walk.allocate(logits.shape());
    walk.run_backward(walk.run_backward(dlogits));
  }
  return finish(persistent, trace);
}

}  // namespace

TrainingPlan plan_training(const PlanInputs& in, std::optional<std::size_t> memory_budget) {
  BT_CHECK(in.mode != TilerMode::stream || in.image_width,
           "plan: tiler.mode stream needs the image size (--image WIDTHxHEIGHT or an image file): the streamed step "
           "holds the whole image's feature map");
  BT_CHECK(in.tile_batch > 0, "plan: train.tile_batch must be positive, got {}", in.tile_batch);
  TrainingPlan plan;
  plan.inputs = in;
  plan.tile = input_edge(in);
  const net::KernelMemoryModel kernels = kernel_model(in);
  const net::EncoderSpec& spec = in.model.encoder;

  std::optional<Grid> grid;
  if (in.image_width) grid = image_grid(in, plan.tile);
  plan.tiles = grid ? grid->tiles : in.tile_batch;
  plan.tile_batch = std::min(in.tile_batch, plan.tiles);
  PlannedModel model(in);
  plan.encoder = net::plan_encoder(model.encoder, {plan.tile_batch, spec.in_channels, plan.tile, plan.tile}, kernels,
                                   in.freeze_bn, in.compute_dtype);
  plan.step = step_memory(model, in, plan.tile, plan.tile_batch, plan.tiles);
  plan.step.kept_activations = plan.encoder.kept_bytes;
  if (in.backend == Backend::cuda) plan.cuda_runtime = kCudaRuntimeBytes;
  const std::int64_t in_flight = in.tiles_in_flight > 0 ? in.tiles_in_flight : 4 * in.tile_batch;
  plan.host_tile_buffers = static_cast<std::size_t>(std::max(in_flight, 2 * in.tile_batch) * spec.in_channels *
                                                    plan.tile * plan.tile) * sizeof(float);

  if (grid) {
    ImageFigures image;
    image.width = grid->width;
    image.height = grid->height;
    image.grid_cols = grid->cols;
    image.grid_rows = grid->rows;
    image.tiles = grid->tiles;
    image.pixel_ratio = static_cast<double>(grid->tiles * plan.tile * plan.tile) /
                        static_cast<double>(grid->width * grid->height);
    // FLOPs scale with the batch: per tile, from the batch's plan.
    const double batch = static_cast<double>(plan.tile_batch);
    const double forward = plan.encoder.forward_flops / batch, backward = plan.encoder.backward_flops / batch;
    const double n = static_cast<double>(grid->tiles);
    image.passes = single_pass(in) ? 1 : 2;
    image.trained_tiles = in.top_tiles > 0 ? std::min(in.top_tiles, grid->tiles) : grid->tiles;
    const double trained = static_cast<double>(image.trained_tiles);
    image.pass1_forward_flops = image.passes == 2 ? n * forward : 0.0;
    image.pass2_forward_flops = trained * forward;
    image.pass2_backward_flops = trained * backward;
    image.tiled_flops = image.pass1_forward_flops + image.pass2_forward_flops + image.pass2_backward_flops;
    image.whole_image_encoder = net::plan_encoder(model.encoder, {1, spec.in_channels, grid->height, grid->width}, kernels,
                                                  in.freeze_bn, in.compute_dtype);
    image.whole_image_encoder.layers.clear();  // the table is the tile's; keep the totals
    image.whole_image_flops = image.whole_image_encoder.forward_flops + image.whole_image_encoder.backward_flops;
    image.whole_image = whole_image_memory(model, in, grid->width, grid->height);
    image.whole_image.kept_activations = image.whole_image_encoder.kept_bytes;
    plan.image = image;
  }

  if (in.mode == TilerMode::stream) {
    const net::ForwardContext ctx = encoder_training(in);
    net::StreamingTrunk trunk(model.encoder);
    const net::StreamPlan stream =
        trunk.plan({1, spec.in_channels, grid->height, grid->width}, in.tile, ctx);  // refuses a layer, named
    StreamFigures f;
    f.tiles = static_cast<std::int64_t>(stream.tiles.size());
    f.largest_input = stream.largest_input();
    f.feature_map = stream.feature_map;
    f.stride = stream.field.y.stride;
    f.halo_before = stream.field.y.before;
    f.halo_after = stream.field.y.after;
    f.halo_overhead = stream.halo_overhead();
    f.memory = net::plan_stream_memory(model.encoder, stream, kernels, in.compute_dtype);
    // The head over the map's cells is a few rows of C floats beside the map: the
    // step is the persistent memory and the trunk's streamed step.
    const Persistent persistent =
        persistent_memory(in, {&model.encoder, model.aggregator.get(), &model.head}, kernels);
    StepMemory m;
    m.parameters = persistent.parameters;
    m.gradients = persistent.gradients;
    m.optimizer_state = persistent.optimizer_state;
    m.workspace = persistent.workspace;
    m.activations = f.memory.step_peak;
    m.features = 2 * f.memory.feature_map;
    m.peak = m.parameters + m.gradients + m.optimizer_state + m.workspace + m.activations;
    m.peak_phase = "a streaming tile's backward (the largest tile)";
    plan.step = m;
    plan.tiles = f.tiles;
    plan.host_tile_buffers = 0;
    if (plan.image) {
      // Each tile's input is read twice (forward, then recomputed with activations
      // kept) and backpropagated once: the whole image's FLOPs times the halo overhead
      // (up to the rounding of each tile's shape through the strides).
      ImageFigures& im = *plan.image;
      im.tiles = im.trained_tiles = f.tiles;
      im.passes = 2;
      im.pixel_ratio = f.halo_overhead;
      im.pass1_forward_flops = f.halo_overhead * im.whole_image_encoder.forward_flops;
      im.pass2_forward_flops = im.pass1_forward_flops;
      im.pass2_backward_flops = f.halo_overhead * im.whole_image_encoder.backward_flops;
      im.tiled_flops = im.pass1_forward_flops + im.pass2_forward_flops + im.pass2_backward_flops;
    }
    plan.stream = f;
  }

  if (memory_budget) {
    BudgetFigures budget;
    budget.budget = *memory_budget;
    const std::int64_t batch_limit = grid ? std::max<std::int64_t>(1, grid->tiles) : std::int64_t{1} << 16;
    // A streamed step reads one tile at a time: no tile batch to size.
    budget.max_tile_batch = in.mode == TilerMode::stream ? static_cast<std::int64_t>(plan.step.peak <= budget.budget)
                                                : max_batch(model, in, plan.tile, budget.budget, batch_limit);
    if (in.mode == TilerMode::tiles) {
      const std::int64_t tile_limit = grid ? std::max(grid->width, grid->height) : 8192;
      for (std::int64_t tile = 32; tile <= std::max<std::int64_t>(32, tile_limit); tile += 32) {
        const auto peak = peak_or_none(model, in, tile, in.tile_batch);
        if (peak && *peak <= budget.budget) budget.max_tile = tile;
      }
      for (std::int64_t tile : {64, 128, 256, 512, 1024, 2048}) {
        if (grid && tile > std::max(grid->width, grid->height)) break;
        if (tile <= in.overlap) continue;
        const std::int64_t limit = grid ? std::max<std::int64_t>(1, image_grid(in, tile).tiles) : std::int64_t{1} << 16;
        budget.batch_by_tile.push_back({tile, max_batch(model, in, tile, budget.budget, limit)});
      }
    }
    plan.budget = budget;
  }
  return plan;
}

// ---- output ---------------------------------------------------------------------

namespace {

nlohmann::json memory_json(const StepMemory& m) {
  return {{"peak_bytes", m.peak},
          {"peak_phase", m.peak_phase},
          {"parameters_bytes", m.parameters},
          {"gradients_bytes", m.gradients},
          {"optimizer_state_bytes", m.optimizer_state},
          {"workspace_bytes", m.workspace},
          {"activations_bytes", m.activations},
          {"kept_activations_bytes", m.kept_activations},
          {"features_bytes", m.features}};
}

}  // namespace

nlohmann::json to_json(const TrainingPlan& plan) {
  const PlanInputs& in = plan.inputs;
  nlohmann::json layers = nlohmann::json::array();
  for (const net::LayerPlan& row : plan.encoder.layers)
    layers.push_back({{"name", row.name},
                      {"kind", row.kind},
                      {"output", row.output},
                      {"output_bytes", row.output_bytes},
                      {"kept_bytes", row.kept_bytes},
                      {"parameters", row.parameters},
                      {"parameter_bytes", row.parameter_bytes},
                      {"forward_flops", row.forward_flops},
                      {"backward_flops", row.backward_flops}});
  nlohmann::json out = {
      {"model",
       {{"preset", in.model.encoder.preset},
        {"in_channels", in.model.encoder.in_channels},
        {"feature_dim", in.model.encoder.feature_dim()},
        {"num_classes", in.model.num_classes},
        {"stem",
         {{"kernel", in.model.encoder.stem.kernel},
          {"stride", in.model.encoder.stem.stride},
          {"padding", in.model.encoder.stem.padding},
          {"maxpool", in.model.encoder.stem.maxpool}}},
        {"parameters", plan.encoder.parameters.count}}},
      {"backend", backend_name(in.backend)},
      {"mode", std::string(choice_name(in.mode))},
      {"tile", plan.tile},
      {"overlap", in.overlap},
      {"tile_batch", plan.tile_batch},
      {"tiles", plan.tiles},
      {"optimizer", std::string(choice_name(in.optimizer))},
      {"aggregator", net::aggregator_kind_name(in.aggregator.kind)},
      {"layers", layers},
      {"tile_batch_flops", {{"forward", plan.encoder.forward_flops}, {"backward", plan.encoder.backward_flops}}},
      {"step_memory", memory_json(plan.step)},
      {"host_tile_buffers_bytes", plan.host_tile_buffers}};
  if (in.backend == Backend::cuda)
    out["cuda_runtime"] = {{"bytes", plan.cuda_runtime},
                           {"source", "constant"},  // pipeline/plan/plan.hpp's kCudaRuntimeBytes, docs/cuda.md
                           {"device_total_bytes", plan.step.peak + plan.cuda_runtime}};
  if (plan.image) {
    const ImageFigures& im = *plan.image;
    out["image"] = {{"width", im.width},
                    {"height", im.height},
                    {"grid", {{"cols", im.grid_cols}, {"rows", im.grid_rows}}},
                    {"tiles", im.tiles},
                    {"pixel_ratio", im.pixel_ratio},
                    {"passes", im.passes},
                    {"trained_tiles", im.trained_tiles},
                    {"flops",
                     {{"pass1_forward", im.pass1_forward_flops},
                      {"pass2_forward", im.pass2_forward_flops},
                      {"pass2_backward", im.pass2_backward_flops},
                      {"tiled_total", im.tiled_flops},
                      {"whole_image", im.whole_image_flops},
                      {"tiled_over_whole", im.tiled_flops / im.whole_image_flops}}},
                    {"whole_image_memory", memory_json(im.whole_image)}};
  }
  if (plan.stream) {
    const StreamFigures& f = *plan.stream;
    out["stream"] = {{"tiles", f.tiles},
                     {"largest_input", f.largest_input},
                     {"feature_map", f.feature_map},
                     {"stride", f.stride},
                     {"halo", {{"before", f.halo_before}, {"after", f.halo_after}}},
                     {"halo_overhead", f.halo_overhead},
                     {"tile_step_bytes", f.memory.tile_step},
                     {"feature_map_bytes", f.memory.feature_map},
                     {"step_peak_bytes", f.memory.step_peak}};
  }
  if (plan.budget) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& row : plan.budget->batch_by_tile) rows.push_back({{"tile", row.tile}, {"max_batch", row.max_batch}});
    out["budget"] = {{"bytes", plan.budget->budget},
                     {"max_tile_batch", plan.budget->max_tile_batch},
                     {"max_tile", plan.budget->max_tile},
                     {"fits", plan.step.peak <= plan.budget->budget},
                     {"batch_by_tile", rows}};
  }
  return out;
}

std::string format_plan(const TrainingPlan& plan) {
  const PlanInputs& in = plan.inputs;
  const net::EncoderSpec& spec = in.model.encoder;
  std::string out;
  auto line = [&]<typename... Args>(fmt::format_string<Args...> format, Args&&... args) {
    out += fmt::format(format, std::forward<Args>(args)...) + "\n";
  };
  line("{} ({} input channel{}, stem {}x{}/{}{}), {} parameters; {} aggregator, {} classes; {} on {}", spec.preset,
       spec.in_channels, spec.in_channels == 1 ? "" : "s", spec.stem.kernel, spec.stem.kernel, spec.stem.stride,
       spec.stem.maxpool ? " + maxpool" : "", plan.encoder.parameters.count, net::aggregator_kind_name(in.aggregator.kind),
       in.model.num_classes, choice_name(in.optimizer), backend_name(in.backend));
  line("");
  line("Per layer, one tile batch [{}, {}, {}, {}]:", plan.tile_batch, spec.in_channels, plan.tile, plan.tile);
  line("{:<24} {:<14} {:<20} {:>11} {:>11} {:>11} {:>12}", "layer", "kind", "output", "activation", "kept",
       "params", "fwd FLOPs");
  for (const net::LayerPlan& row : plan.encoder.layers)
    line("{:<24} {:<14} {:<20} {:>11} {:>11} {:>11} {:>12}", row.name, row.kind, shape_str(row.output),
         format_bytes(row.output_bytes), row.kept_bytes ? format_bytes(row.kept_bytes) : "-",
         row.parameter_bytes ? format_bytes(row.parameter_bytes) : "-",
         row.forward_flops > 0 ? format_flops(row.forward_flops) : "-");
  line("{:<24} {:<14} {:<20} {:>11} {:>11} {:>11} {:>12}", "total", "", "", "", format_bytes(plan.encoder.kept_bytes),
       format_bytes(plan.encoder.parameters.values), format_flops(plan.encoder.forward_flops));
  line("FLOPs count multiply-adds x2 of convolutions and linear layers; backward {} per batch.",
       format_flops(plan.encoder.backward_flops));
  line("");

  auto memory = [&](const char* title, const StepMemory& m) {
    line("{}: peak {}", title, format_bytes(m.peak));
    line("  weights + BatchNorm statistics {:>11}", format_bytes(m.parameters));
    line("  gradients                      {:>11}", format_bytes(m.gradients));
    line("  {:<31}{:>11}", fmt::format("optimizer state ({})", choice_name(in.optimizer)), format_bytes(m.optimizer_state));
    if (m.workspace) line("  cuDNN workspace (limit)        {:>11}", format_bytes(m.workspace));
    line("  activations at the peak        {:>11}  (kept for backward: {}; tile features and gradients: {})",
         format_bytes(m.activations), format_bytes(m.kept_activations), format_bytes(m.features));
    line("  peak reached at: {}", m.peak_phase);
  };
  if (plan.stream) {
    const StreamFigures& f = *plan.stream;
    line("Streamed (tiler.mode stream): {} tiles of {} over the image, the largest read {} (halo {} before, {} after "
         "a cell, stride {}); feature map {}",
         f.tiles, plan.tile, shape_str(f.largest_input), f.halo_before, f.halo_after, f.stride, shape_str(f.feature_map));
    line("  halo overhead: {:.2f} (pixels read per forward / image pixels; the forward runs twice and the backward "
         "once over them)",
         f.halo_overhead);
    line("  one tile's forward (kept) + backward {}, the feature map {} and its gradient {}: {}",
         format_bytes(f.memory.tile_step), format_bytes(f.memory.feature_map), format_bytes(f.memory.feature_map),
         format_bytes(f.memory.step_peak));
  }
  memory(plan.stream ? fmt::format("One streamed training step, {} tiles one at a time", plan.tiles).c_str()
                     : fmt::format("One training step ({}), {} tile{} per batch, {} tile{} per image",
                                   single_pass(in) ? "one pass: the instance vote trains every tile" : "two passes",
                                   plan.tile_batch, plan.tile_batch == 1 ? "" : "s", plan.tiles,
                                   plan.tiles == 1 ? "" : "s")
                           .c_str(),
         plan.step);
  if (in.backend == Backend::cpu && !plan.stream)
    line("  plus the tile stream's tiles in flight (host): {}", format_bytes(plan.host_tile_buffers));
  if (in.backend == Backend::cuda)
    line("  plus the CUDA context and cuDNN/cuBLAS handles, outside the allocator and device.memory_limit: {} (a "
         "documented constant, docs/cuda.md): {} on the card",
         format_bytes(plan.cuda_runtime), format_bytes(plan.step.peak + plan.cuda_runtime));
  line("");

  if (plan.image) {
    const ImageFigures& im = *plan.image;
    const char* way = plan.stream ? "streamed" : "tiled";
    if (plan.stream) {
      line("Image {}x{}: {} streaming tiles of {}, {:.2f}x the image's pixels read per forward", im.width, im.height,
           plan.stream->tiles, plan.tile, im.pixel_ratio);
      line("  FLOPs per image, streamed: {} (first forward {}, recomputed forward {}, backward {})",
           format_flops(im.tiled_flops), format_flops(im.pass1_forward_flops), format_flops(im.pass2_forward_flops),
           format_flops(im.pass2_backward_flops));
    } else {
      line("Image {}x{}: {} x {} grid, {} tiles of {} (overlap {}), {:.2f}x the image's pixels", im.width, im.height,
           im.grid_cols, im.grid_rows, im.tiles, plan.tile, in.overlap, im.pixel_ratio);
      if (im.passes == 1)
        line("  FLOPs per image, tiled: {} (one pass, every tile trained with the image's label: forward {}, backward {})",
             format_flops(im.tiled_flops), format_flops(im.pass2_forward_flops), format_flops(im.pass2_backward_flops));
      else if (im.trained_tiles < im.tiles)
        line("  FLOPs per image, tiled: {} (pass 1 forward {} of every tile; pass 2 forward {}, backward {} of the {} "
             "top tiles)",
             format_flops(im.tiled_flops), format_flops(im.pass1_forward_flops), format_flops(im.pass2_forward_flops),
             format_flops(im.pass2_backward_flops), im.trained_tiles);
      else
        line("  FLOPs per image, tiled: {} (pass 1 forward {}, pass 2 forward {}, backward {})",
             format_flops(im.tiled_flops), format_flops(im.pass1_forward_flops), format_flops(im.pass2_forward_flops),
             format_flops(im.pass2_backward_flops));
    }
    line("  FLOPs per image, whole image at batch 1: {}; {} / whole = {:.2f}", format_flops(im.whole_image_flops), way,
         im.tiled_flops / im.whole_image_flops);
    memory("  Whole image at batch 1", im.whole_image);
    line("  {} / whole-image peak memory = {:.3f}", way,
         static_cast<double>(plan.step.peak) / static_cast<double>(im.whole_image.peak));
    line("");
  }
  if (plan.budget) {
    const BudgetFigures& b = *plan.budget;
    line("Budget {}: this configuration {} ({} of it)", format_bytes(b.budget),
         plan.step.peak <= b.budget ? "fits" : "does NOT fit",
         fmt::format("{:.0f}%", 100.0 * static_cast<double>(plan.step.peak) / static_cast<double>(b.budget)));
    if (in.mode != TilerMode::stream) line("  largest tile batch at tile {}: {}", plan.tile, b.max_tile_batch);
    if (in.mode == TilerMode::tiles) {
      line("  largest tile (multiple of 32) at tile batch {}: {}", in.tile_batch, b.max_tile);
      std::string rows;
      for (const auto& row : b.batch_by_tile) rows += fmt::format("  {}: {}", row.tile, row.max_batch);
      if (!rows.empty()) line("  largest batch by tile size:{}", rows);
    }
    if (plan.image && plan.image->whole_image.peak > b.budget)
      line("  whole-image training at batch 1 needs {}: it does not fit", format_bytes(plan.image->whole_image.peak));
  }
  return out;
}

}  // namespace bigtrain
