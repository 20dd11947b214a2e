// The planner against reality: it counts the real encoders' parameters, its FLOPs
// match published counts, and the predicted peaks of a two-pass training step
// (forward, head, recompute + backward, optimizer step) and of forwards that keep
// nothing (pass 1, inference) are close to the peaks the caching allocator measures
// when the same layers run.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include <cmath>
#include <memory>

#include <fmt/format.h>

#include "kernels/core/allocator.hpp"
#include "kernels/core/host_allocator.hpp"
#include "kernels/core/error.hpp"
#include "net/aggregator.hpp"
#include "net/encoder.hpp"
#include "net/linear.hpp"
#include "net/memory_plan.hpp"
#include "pipeline/plan/recompute_split.hpp"
#include "net/optimizer.hpp"
#include "pipeline/engine/two_pass.hpp"
#include "pipeline/plan/plan.hpp"
#include "pipeline/plan/plan_units.hpp"
#include "tests/support/compute_type.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain {
namespace {

net::ModelSpec spec_from(const std::string& yaml) { return net::model_spec_from_yaml_string(yaml, "plan_test"); }

PlanInputs inputs_for(const net::ModelSpec& model, std::int64_t tile, std::int64_t batch) {
  PlanInputs in;
  in.model = model;
  in.aggregator.kind = net::AggregatorKind::attention;
  in.aggregator.hidden = 64;
  in.optimizer = net::OptimizerKind::adamw;
  in.tile = tile;
  in.tile_batch = batch;
  in.backend = Backend::cpu;
  return in;
}

// ---- structure ------------------------------------------------------------------

// The planner walks the layers training builds, so its parameters are theirs; each
// table row carries exactly the parameters the model names under the row's prefix.
TEST(PlanStructure, PlannedParametersAreTheRealEncodersPerRow) {
  for (const char* yaml : {"preset: resnet18\nin_channels: 1\nnum_classes: 2\n",
                           "preset: resnet50\nin_channels: 1\nnum_classes: 2\nstem: {kernel: 11, stride: 4}\n",
                           "preset: resnet20\nin_channels: 3\nwidth: 0.5\nnum_classes: 10\n",
                           "preset: small\nin_channels: 1\nnum_classes: 3\nstem: {kernel: 5, stride: 2, maxpool: true}\n"}) {
    SCOPED_TRACE(yaml);
    const net::ModelSpec spec = spec_from(yaml);
    net::Encoder real(spec.encoder, std::nullopt);
    const net::StateRefs refs = real.state();
    const net::EncoderPlan plan =
        net::plan_encoder(spec.encoder, {2, spec.encoder.in_channels, 128, 128}, net::KernelMemoryModel{});
    std::int64_t count = 0, rows_count = 0;
    std::size_t buffer_bytes = 0, rows_buffer_bytes = 0;
    for (const net::Parameter* p : refs.parameters) count += p->value.numel();
    for (const net::Buffer* b : refs.buffers) buffer_bytes += HostAllocator::rounded_size(b->value.nbytes());
    EXPECT_EQ(plan.parameters.count, count);
    EXPECT_EQ(plan.parameters.buffers, buffer_bytes);
    for (const net::LayerPlan& row : plan.layers) {
      std::int64_t named = 0;
      for (const net::Parameter* p : refs.parameters)
        if (p->name.rfind(row.name + ".", 0) == 0 && p->name.find('.', row.name.size() + 1) == std::string::npos)
          named += p->value.numel();
      EXPECT_EQ(row.parameters, named) << row.name;
      rows_count += row.parameters;
      rows_buffer_bytes += row.buffer_bytes;
    }
    EXPECT_EQ(rows_count, count);
    EXPECT_EQ(rows_buffer_bytes, buffer_bytes);
  }
}

TEST(PlanStructure, OutputShapesMatchARealForward) {
  const net::ModelSpec spec = spec_from("preset: resnet18\nin_channels: 1\nnum_classes: 2\nstem: {kernel: 11, stride: 4}\n");
  const net::EncoderPlan plan = net::plan_encoder(spec.encoder, {2, 1, 100, 84}, net::KernelMemoryModel{});
  ASSERT_FALSE(plan.layers.empty());
  EXPECT_EQ(plan.layers.back().output, (Shape{2, 512}));
  net::Encoder real(spec.encoder, 3);
  const Tensor features = real.forward(Tensor::zeros({2, 1, 100, 84}), net::ForwardContext::inference(Backend::cpu));
  EXPECT_EQ(features.shape(), plan.layers.back().output);
  // The stem's output: (100 + 2*5 - 11) / 4 + 1 = 25 rows, (84 + 10 - 11) / 4 + 1 = 21 columns.
  EXPECT_EQ(plan.layers.front().output, (Shape{2, 64, 25, 21}));
}

// torchvision's ResNet-50 at 224x224, 3 channels, 1000 classes: 4.09 G multiply-adds
// (the figure of its model card and of fvcore/ptflops), i.e. 8.18 GFLOP counted as 2 per MAC.
TEST(PlanStructure, ResNet50FlopsMatchThePublishedCount) {
  const net::ModelSpec spec = spec_from("preset: resnet50\nin_channels: 3\nnum_classes: 1000\n");
  const net::EncoderPlan plan = net::plan_encoder(spec.encoder, {1, 3, 224, 224}, net::KernelMemoryModel{});
  const double head_flops = 2.0 * 2048 * 1000;
  EXPECT_NEAR((plan.forward_flops + head_flops) / 2.0, 4.09e9, 0.02e9);  // the published figure has 3 digits
  EXPECT_EQ(plan.parameters.count + 2048 * 1000 + 1000, 25'557'032);  // torchvision: 25,557,032 parameters
}

// ---- predicted vs measured peak -------------------------------------------------

// Planned over measured peaks, as tight as the walk allows. Measured on this suite's
// cases (AVX-512 CPU): steps 0.996-1.000 (the miss: a gradient the real residual
// code holds to the end of a nested expression, which the walk frees when its
// consumer returns), so 1% is 2.5x the largest miss; forwards 1.000-1.030 (the RGB
// stem's NHWC source reorder is planned but oneDNN's forward skips it), so 5%.
constexpr double kStepTolerance = 0.01;
constexpr double kForwardTolerance = 0.05;

struct Case {
  const char* name;
  const char* model;
  std::int64_t tile;
  std::int64_t batch;
  bool freeze_bn = false;  // BatchNorm trained inside the convolutions (net/conv_bn_fusion.hpp)
  DType compute_dtype = DType::f32;  // train.precision: bf16 operands are half-size temporaries
};

// One real training step of one image whose tiles form one batch x: `image` makes the
// step's calls between begin_image and end_image, then the optimizer steps; measured
// after a first step has created the gradients, optimizer state and kernel caches
// (the steady state the plan predicts).
using ImageCalls = std::function<void(TwoPassStep& step, const Tensor& x)>;
std::size_t measured_step_peak(const net::ModelSpec& spec, const PlanInputs& in, const ImageCalls& image) {
  net::Encoder encoder(spec.encoder, 11);
  auto aggregator = net::make_aggregator(in.aggregator, encoder.feature_dim(), 12);
  net::Linear head("fc", encoder.feature_dim(), spec.num_classes, 13);
  const ImageModel model{&encoder, aggregator.get(), &head};
  net::OptimizerConfig opt;
  opt.kind = in.optimizer;
  auto optimizer = net::make_optimizer(opt, model.parameters(), Backend::cpu);
  TwoPassStep step(model, {.backend = Backend::cpu, .freeze_bn = in.freeze_bn, .encoder_compute_dtype = in.compute_dtype});
  const Tensor x = testing::random_tensor({in.tile_batch, spec.encoder.in_channels, in.tile, in.tile}, 5);
  auto one_step = [&] {
    optimizer->zero_grad();
    step.begin_image(in.tile_batch, 1, 7);
    image(step, x);
    step.end_image();
    optimizer->step();
  };
  one_step();
  Allocator& allocator = allocator_for(Device::cpu());
  allocator.reset_peak();
  one_step();
  return allocator.stats().peak_bytes;
}

class PlanVsMeasured : public ::testing::TestWithParam<Case> {};

TEST_P(PlanVsMeasured, PredictedPeakWithin1PercentOfTheAllocator) {
  const Case& c = GetParam();
  BT_SKIP_UNLESS_COMPUTES(Backend::cpu, c.compute_dtype);
  const net::ModelSpec spec = spec_from(c.model);
  PlanInputs in = inputs_for(spec, c.tile, c.batch);
  in.freeze_bn = c.freeze_bn;
  in.compute_dtype = c.compute_dtype;
  const StepMemory plan = plan_step_memory(in, c.tile, c.batch, c.batch);
  const std::size_t predicted = plan.peak;
  // Pass 1, head and loss, pass 2.
  const std::size_t measured = measured_step_peak(spec, in, [](TwoPassStep& step, const Tensor& x) {
    step.pass1_batch(x, 0);
    step.finish_image(1.0f);
    step.pass2_batch(x, 0);
  });
  const double ratio = static_cast<double>(predicted) / static_cast<double>(measured);
  // Printed for the record (the figures quoted in notes come from this line).
  std::printf("[plan] %-34s predicted %12zu  measured %12zu  predicted/measured %.3f  (peak at %s)\n", c.name,
              predicted, measured, ratio, plan.peak_phase.c_str());
  // Was the 20%; the layers' own footprints hold it to kStepTolerance.
  EXPECT_GT(ratio, 1.0 - kStepTolerance);
  EXPECT_LT(ratio, 1.0 + kStepTolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Encoders, PlanVsMeasured,
    ::testing::Values(
        Case{"small_tile128_batch4", "preset: small\nin_channels: 1\nnum_classes: 2\n", 128, 4},
        Case{"resnet18_tile224_batch2", "preset: resnet18\nin_channels: 1\nnum_classes: 2\n", 224, 2},
        Case{"resnet50_stem11s4_tile256_batch1",
             "preset: resnet50\nin_channels: 1\nnum_classes: 2\nstem: {kernel: 11, stride: 4}\n", 256, 1},
        // RGB: the stem's input is reordered to NHWC (a temporary); odd channel counts pad to oneDNN's blocks.
        Case{"small_rgb_width03_tile96_batch8", "preset: small\nin_channels: 3\nnum_classes: 2\nwidth: 0.3\n", 96, 8},
        Case{"resnet18_frozen_tile224_batch2", "preset: resnet18\nin_channels: 1\nnum_classes: 2\n", 224, 2, true},
        Case{"resnet50_frozen_tile128_batch2", "preset: resnet50\nin_channels: 1\nnum_classes: 2\n", 128, 2, true},
        Case{"small_frozen_tile128_batch4", "preset: small\nin_channels: 1\nnum_classes: 2\n", 128, 4, true},
        Case{"resnet18_bf16_tile224_batch2", "preset: resnet18\nin_channels: 1\nnum_classes: 2\n", 224, 2, false,
             DType::bf16},
        Case{"resnet50_frozen_bf16_tile128_batch2", "preset: resnet50\nin_channels: 1\nnum_classes: 2\n", 128, 2,
             true, DType::bf16},
        Case{"small_rgb_bf16_width03_tile96_batch8", "preset: small\nin_channels: 3\nnum_classes: 2\nwidth: 0.3\n",
             96, 8, false, DType::bf16}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// aggregator.kind instance without top_tiles trains in one pass (TwoPassStep::
// single_pass): the plan walks that pass, not two, and its peak is the measured one
// of a real single-pass step (train_instances_batch, the vote, the optimizer step).
TEST(PlanSinglePass, InstanceVotePeakIsTheMeasuredOneAndNoPass2IsPlanned) {
  const net::ModelSpec spec = spec_from("preset: small\nin_channels: 1\nnum_classes: 3\n");
  PlanInputs in = inputs_for(spec, 128, 4);
  in.aggregator.kind = net::AggregatorKind::instance;
  ASSERT_TRUE(single_pass(in));
  const StepMemory plan = plan_step_memory(in, in.tile, in.tile_batch, in.tile_batch);
  const std::size_t measured = measured_step_peak(spec, in, [](TwoPassStep& step, const Tensor& x) {
    ASSERT_TRUE(step.single_pass());
    step.train_instances_batch(x, 0, 1.0f);
    step.finish_image(1.0f);
  });
  const double ratio = static_cast<double>(plan.peak) / static_cast<double>(measured);
  std::printf("[plan] instance single pass predicted %zu measured %zu predicted/measured %.3f (peak at %s)\n",
              plan.peak, measured, ratio, plan.peak_phase.c_str());
  EXPECT_GT(ratio, 1.0 - kStepTolerance);
  EXPECT_LT(ratio, 1.0 + kStepTolerance);
  EXPECT_EQ(plan.peak_phase.find("pass 2"), std::string::npos) << plan.peak_phase;

  // The image figures count one pass: no pass 1, every tile forward and backward once.
  in.image_width = in.image_height = 512;
  const TrainingPlan whole = plan_training(in);
  ASSERT_TRUE(whole.image);
  EXPECT_EQ(whole.image->passes, 1);
  EXPECT_EQ(whole.image->pass1_forward_flops, 0.0);
  EXPECT_EQ(whole.image->trained_tiles, 16);
  EXPECT_EQ(format_plan(whole).find("pass 2"), std::string::npos) << format_plan(whole);
  EXPECT_NE(format_plan(whole).find("one pass"), std::string::npos);

  // With top_tiles both passes run; pass 2 only over the M tiles.
  in.top_tiles = 3;
  const TrainingPlan top = plan_training(in);
  EXPECT_FALSE(single_pass(in));
  EXPECT_EQ(top.image->passes, 2);
  EXPECT_EQ(top.image->trained_tiles, 3);
  EXPECT_DOUBLE_EQ(top.image->pass2_forward_flops, top.image->pass1_forward_flops * 3.0 / 16.0);
}

// Forwards that keep nothing, one batch through a real encoder: pass 1 (training
// BatchNorm, nothing kept) and inference (running statistics), each measured after
// a first forward has built the kernels' caches. Both peaks count the input.
struct ForwardPeaks {
  std::size_t pass1 = 0, inference = 0;
};

ForwardPeaks measured_forward_peaks(const net::ModelSpec& spec, std::int64_t tile, std::int64_t batch,
                                    DType compute_dtype) {
  net::Encoder encoder(spec.encoder, 11);
  Allocator& allocator = allocator_for(Device::cpu());
  net::ForwardContext pass1 = net::ForwardContext::train(Backend::cpu);
  pass1.keep_activations = false;
  pass1.compute_dtype = compute_dtype;
  net::ForwardContext inference = net::ForwardContext::inference(Backend::cpu);
  inference.compute_dtype = compute_dtype;
  auto peak_of = [&](const net::ForwardContext& ctx) {
    const Shape shape{batch, spec.encoder.in_channels, tile, tile};
    encoder.forward(testing::random_tensor(shape, 5), ctx);
    const std::size_t before = allocator.stats().current_bytes;
    allocator.reset_peak();
    const Tensor x = testing::random_tensor(shape, 5);
    encoder.forward(x, ctx);
    return allocator.stats().peak_bytes - before;
  };
  return {.pass1 = peak_of(pass1), .inference = peak_of(inference)};
}

TEST_P(PlanVsMeasured, ForwardPeaksOfPass1AndInference) {
  const Case& c = GetParam();
  BT_SKIP_UNLESS_COMPUTES(Backend::cpu, c.compute_dtype);
  const net::ModelSpec spec = spec_from(c.model);
  const net::EncoderPlan plan = net::plan_encoder(spec.encoder, {c.batch, spec.encoder.in_channels, c.tile, c.tile},
                                                  net::KernelMemoryModel::for_backend(Backend::cpu),
                                                  /*freeze_bn=*/false, c.compute_dtype);
  const ForwardPeaks measured = measured_forward_peaks(spec, c.tile, c.batch, c.compute_dtype);
  const double pass1 = static_cast<double>(plan.pass1_peak) / static_cast<double>(measured.pass1);
  const double inference = static_cast<double>(plan.inference_peak) / static_cast<double>(measured.inference);
  std::printf("[plan] %-34s pass 1 predicted %11zu measured %11zu (%.3f); inference predicted %11zu measured %11zu (%.3f)\n",
              c.name, plan.pass1_peak, measured.pass1, pass1, plan.inference_peak, measured.inference, inference);
  EXPECT_NEAR(pass1, 1.0, kForwardTolerance);
  EXPECT_NEAR(inference, 1.0, kForwardTolerance);
}

// ---- image figures and budget ---------------------------------------------------

// The setting of the training issue: ResNet-50 with an 11x11 stride-4 stem on
// 2435x2435 images, tiles of 256 in batches of 16, must train in under 2 GiB; the
// same network on the whole image at batch 1 does not fit.
TEST(PlanImage, WholeImageScalesWithPixelsWhileTheTiledStepStaysUnderTwoGiB) {
  PlanInputs in = inputs_for(spec_from("preset: resnet50\nin_channels: 1\nnum_classes: 2\nstem: {kernel: 11, stride: 4}\n"),
                             256, 16);
  in.overlap = 32;
  in.image_width = 2435;
  in.image_height = 2435;
  const std::size_t two_gib = std::size_t{2} << 30;
  const TrainingPlan plan = plan_training(in, two_gib);
  ASSERT_TRUE(plan.image && plan.budget);
  // Stride 224 over 2435 pixels with padding: ceil((2435 - 256) / 224) + 1 = 11 columns and rows.
  EXPECT_EQ(plan.image->tiles, 121);
  EXPECT_NEAR(plan.image->pixel_ratio, 121.0 * 256 * 256 / (2435.0 * 2435), 1e-9);
  EXPECT_LT(plan.step.peak, two_gib);
  EXPECT_GT(plan.image->whole_image.peak, two_gib);
  EXPECT_GE(plan.budget->max_tile_batch, 16);
  // Kept activations grow with the stem's output area: 609^2 pixels for the image,
  // 64^2 per tile (the input, kept by the stem, scales the same way). Borders of
  // odd sizes at every stride make it approximate.
  const double per_tile = static_cast<double>(plan.encoder.kept_bytes) / 16.0;
  const double area_ratio = (609.0 * 609.0) / (64.0 * 64.0);
  EXPECT_NEAR(static_cast<double>(plan.image->whole_image.kept_activations) / per_tile / area_ratio, 1.0, 0.1);
  // Tiled: two forwards and one backward over ~1.34x the pixels; whole: one forward and one backward.
  EXPECT_GT(plan.image->tiled_flops, plan.image->whole_image_flops);
  EXPECT_DOUBLE_EQ(plan.image->pass1_forward_flops, plan.image->pass2_forward_flops);
  // H and dL/dH for 121 tiles of 2048 features.
  EXPECT_EQ(plan.step.features, 2 * HostAllocator::rounded_size(121 * 2048 * 4));
}

TEST(PlanBudget, LargestBatchFitsAndTheNextDoesNot) {
  PlanInputs in = inputs_for(spec_from("preset: resnet18\nin_channels: 1\nnum_classes: 2\n"), 256, 8);
  const std::size_t budget = std::size_t{600} << 20;
  const TrainingPlan plan = plan_training(in, budget);
  const std::int64_t best = plan.budget->max_tile_batch;
  ASSERT_GT(best, 0);
  EXPECT_LE(plan_step_memory(in, 256, best, best).peak, budget);
  EXPECT_GT(plan_step_memory(in, 256, best + 1, best + 1).peak, budget);
  const std::int64_t tile = plan.budget->max_tile;
  ASSERT_GE(tile, 32);
  EXPECT_LE(plan_step_memory(in, tile, 8, 8).peak, budget);
  EXPECT_GT(plan_step_memory(in, tile + 32, 8, 8).peak, budget);
}

TEST(PlanBudget, CudaCountsTheWorkspaceAndTwoInputBatches) {
  PlanInputs in = inputs_for(spec_from("preset: resnet18\nin_channels: 1\nnum_classes: 2\n"), 256, 8);
  const StepMemory cpu = plan_step_memory(in, 256, 8, 8);
  in.backend = Backend::cuda;
  const StepMemory cuda = plan_step_memory(in, 256, 8, 8);
  EXPECT_EQ(cuda.workspace, net::KernelMemoryModel::for_backend(Backend::cuda).cuda_workspace_limit);
  EXPECT_EQ(cpu.workspace, 0u);
  EXPECT_EQ(cuda.parameters, cpu.parameters);
}

TEST(PlanErrors, ImpossibleTilesAreClearErrors) {
  // An unpadded 11x11 stem does not fit an 8-pixel tile.
  PlanInputs in = inputs_for(
      spec_from("preset: resnet50\nin_channels: 1\nnum_classes: 2\nstem: {kernel: 11, stride: 4, padding: 0}\n"), 8, 1);
  try {
    plan_training(in);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("smaller than the 11x11 kernel"), std::string::npos) << e.what();
  }
  // A 32-pixel tile alone reaches layer4 as 1x1: training BatchNorm has one value per channel.
  in = inputs_for(spec_from("preset: resnet18\nin_channels: 1\nnum_classes: 2\n"), 32, 1);
  try {
    plan_training(in);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than one value per channel"), std::string::npos) << e.what();
  }
  in.tile_batch = 2;
  EXPECT_NO_THROW(plan_training(in));
}

// ---- units ----------------------------------------------------------------------

TEST(PlanUnits, MemorySizes) {
  EXPECT_EQ(parse_memory_size("2GiB"), std::size_t{2} << 30);
  EXPECT_EQ(parse_memory_size("512MiB"), std::size_t{512} << 20);
  EXPECT_EQ(parse_memory_size("1.5 GiB"), std::size_t{3} << 29);
  EXPECT_EQ(parse_memory_size("2gb"), std::size_t{2'000'000'000});
  EXPECT_EQ(parse_memory_size("2G"), std::size_t{2} << 30);
  EXPECT_EQ(parse_memory_size("4096"), 4096u);
  for (const char* bad : {"", "GiB", "2 GiBs", "-1GiB", "0", "two GiB", "1e3MiB"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(parse_memory_size(bad), Error);
  }
  EXPECT_EQ(format_bytes(std::size_t{3} << 29), "1.50 GiB");
  EXPECT_EQ(format_bytes(100), "100 B");
}

TEST(PlanUnits, ImageSizes) {
  EXPECT_EQ(parse_image_size("2435x2435"), (std::pair<std::int64_t, std::int64_t>{2435, 2435}));
  EXPECT_EQ(parse_image_size("100X20"), (std::pair<std::int64_t, std::int64_t>{100, 20}));
  for (const char* bad : {"2435", "x10", "10x", "0x10", "10x-3", "axb"}) {
    SCOPED_TRACE(bad);
    EXPECT_THROW(parse_image_size(bad), Error);
  }
}


// train.memory_budget: the batches that fit above the recompute-everything peak,
// none where pass 2 trains a subset of the tiles.
TEST(PlanRecompute, KeptBatchesFillTheBudgetAboveTheRecomputePeak) {
  PlanInputs in = inputs_for(spec_from("preset: resnet18\nin_channels: 1\nnum_classes: 2\n"), 128, 4);
  in.image_width = in.image_height = 1024;
  const TrainingPlan plan = plan_training(in);
  ASSERT_GT(plan.step.kept_activations, 0u);
  const std::size_t peak = plan.step.peak, batch = plan.step.kept_activations;
  EXPECT_EQ(recompute_split(plan, peak / 2).kept_batches, 0);
  EXPECT_EQ(recompute_split(plan, peak + batch - 1).kept_batches, 0);
  EXPECT_EQ(recompute_split(plan, peak + 3 * batch).kept_batches, 3);
  const RecomputeSplit split = recompute_split(plan, peak + 3 * batch);
  const ImageKeep small = image_keep(split, 2 * plan.tile_batch, plan.tile_batch);
  EXPECT_EQ(small.kept_batches, 2) << "an image of fewer batches than fit is kept whole";
  EXPECT_EQ(small.tail_children, 0u);
  EXPECT_EQ(kept_tiles(small, plan.tile_batch, 2 * plan.tile_batch), 2 * plan.tile_batch);
  // The plan's image: 64 tiles, 16 batches; whichever keep it picks spares pass 2 at
  // least what 3 whole batches would, within the budget.
  const ImageKeep keep = image_keep(split, plan.image->tiles, plan.tile_batch);
  EXPECT_EQ(keep.batches, 16);
  EXPECT_LE(keep.kept_bytes, 3 * batch);
  EXPECT_GE(keep.saved_forward_flops, 3 * plan.encoder.forward_flops);
  const std::string report = format_recompute_split(plan, split);
  EXPECT_NE(report.find(fmt::format("{} of 16 batches kept whole", keep.kept_batches)), std::string::npos) << report;
  const nlohmann::json json = to_json(plan, split);
  EXPECT_LT(json["image"]["flops"].get<double>(), plan.image->tiled_flops);
  EXPECT_EQ(json["image"]["kept_batches"].get<std::int64_t>(), keep.kept_batches);
  EXPECT_EQ(json["image"]["kept_tail_children"].get<std::size_t>(), keep.tail_children);

  in.top_tiles = 4;
  in.aggregator.kind = net::AggregatorKind::attention;
  const RecomputeSplit top = recompute_split(plan_training(in), std::size_t{1} << 40);
  EXPECT_EQ(top.kept_batches, 0);
  EXPECT_NE(top.nothing_kept_because.find("top_tiles"), std::string::npos);
  EXPECT_EQ(image_keep(top, 64, 4).tail_children, 0u) << "nor a tail";
}

// The kept tail's figures, summed independently from the per-layer table: layer4's
// rows and the input it keeps (layer3.1's output).
TEST(PlanRecompute, TailFiguresSumTheTableFromTheBack) {
  PlanInputs in = inputs_for(spec_from("preset: resnet18\nin_channels: 1\nnum_classes: 2\n"), 128, 4);
  const TrainingPlan plan = plan_training(in);
  const auto& tails = plan.encoder.tails;
  ASSERT_FALSE(tails.empty());
  EXPECT_EQ(tails.front().first, "avgpool");
  for (std::size_t i = 1; i < tails.size(); ++i) {
    EXPECT_GT(tails[i].children, tails[i - 1].children);
    EXPECT_GE(tails[i].kept_bytes, tails[i - 1].kept_bytes);
    EXPECT_GE(tails[i].forward_flops, tails[i - 1].forward_flops);
    EXPECT_NE(tails[i].first, "relu") << "the stem's BatchNorm and ReLU run as one";
  }
  const auto layer4 = std::find_if(tails.begin(), tails.end(), [](const auto& t) { return t.first == "layer4.0"; });
  ASSERT_NE(layer4, tails.end());
  // layer3.1 keeps its output (its ReLU's backward reads it), layer4.0 the same
  // buffer as its input: the table counts it at layer3.1, the tail must too.
  std::size_t kept = 0;
  double flops = 0.0;
  for (const net::LayerPlan& row : plan.encoder.layers) {
    if (row.name.starts_with("layer4.") || row.name == "avgpool") {
      kept += row.kept_bytes;
      flops += row.forward_flops;
    }
    if (row.name == "layer3.1") kept += row.kept_bytes;
  }
  EXPECT_EQ(layer4->kept_bytes, kept);
  EXPECT_DOUBLE_EQ(layer4->forward_flops, flops);
  EXPECT_LT(layer4->kept_bytes, plan.step.kept_activations / 4) << "the deep layers keep little";
  EXPECT_GT(layer4->forward_flops, plan.encoder.forward_flops / 5) << "for much of the forward";
}

// What pass 1 really holds with a kept tail, measured by the allocator over three
// tile batches, against the plan's figure per batch.
TEST(PlanRecompute, AKeptTailHoldsWhatThePlanSays) {
  const net::ModelSpec spec = spec_from("preset: resnet18\nin_channels: 1\nnum_classes: 2\n");
  const PlanInputs in = inputs_for(spec, 128, 4);
  const TrainingPlan plan = plan_training(in);
  net::Encoder encoder(spec.encoder, 11);
  auto aggregator = net::make_aggregator(in.aggregator, encoder.feature_dim(), 12);
  net::Linear head("fc", encoder.feature_dim(), spec.num_classes, 13);
  TwoPassStep step({&encoder, aggregator.get(), &head}, {.backend = Backend::cpu});
  const Tensor x = testing::random_tensor({in.tile_batch, 1, in.tile, in.tile}, 5);
  Allocator& allocator = allocator_for(Device::cpu());
  int checked = 0;
  for (const net::EncoderPlan::Tail& tail : plan.encoder.tails) {
    if (tail.first != "avgpool" && tail.first != "layer4.0" && tail.first != "layer3.0" && tail.first != "layer1.0")
      continue;
    SCOPED_TRACE(tail.first);
    step.begin_image(3 * in.tile_batch, 1, 7, 0, tail.children);
    const std::size_t before = allocator.stats().current_bytes;
    for (std::int64_t b = 0; b < 3; ++b) step.pass1_batch(x, b * in.tile_batch);
    const std::size_t held = allocator.stats().current_bytes - before;
    std::printf("[plan] tail from %-9s held %10zu  planned %10zu (3 batches)\n", tail.first.c_str(), held,
                3 * tail.kept_bytes);
    EXPECT_EQ(held, 3 * tail.kept_bytes);
    step.end_image();
    EXPECT_EQ(encoder.saved_count(), 0u);
    ++checked;
  }
  EXPECT_EQ(checked, 4);
}

// Under a budget too small for one whole batch, every batch keeps the longest tail
// that fits them all.
TEST(PlanRecompute, ABudgetTooSmallForWholeBatchesKeepsATailOfEach) {
  PlanInputs in = inputs_for(spec_from("preset: resnet18\nin_channels: 1\nnum_classes: 2\n"), 128, 4);
  in.image_width = in.image_height = 1024;
  const TrainingPlan plan = plan_training(in);
  const auto& tails = plan.encoder.tails;
  const auto layer4 = std::find_if(tails.begin(), tails.end(), [](const auto& t) { return t.first == "layer4.0"; });
  ASSERT_NE(layer4, tails.end());
  const std::size_t room = 16 * layer4->kept_bytes;
  ASSERT_LT(room, plan.step.kept_activations);
  const RecomputeSplit split = recompute_split(plan, plan.step.peak + room);
  EXPECT_EQ(split.kept_batches, 0) << "no whole batch fits";
  const ImageKeep keep = image_keep(split, 64, 4);
  EXPECT_EQ(keep.kept_batches, 0);
  EXPECT_EQ(keep.tail_children, layer4->children);
  EXPECT_EQ(keep.tail_first, "layer4.0");
  EXPECT_EQ(keep.kept_bytes, room);
  EXPECT_DOUBLE_EQ(keep.saved_forward_flops, 16 * layer4->forward_flops);
  const ImageKeep more_tiles = image_keep(split, 128, 4);
  EXPECT_LT(more_tiles.tail_children, keep.tail_children) << "twice the batches: a shorter tail";
  EXPECT_LE(more_tiles.kept_bytes, room);
  const std::string report = format_recompute_split(plan, split);
  EXPECT_NE(report.find("of the others the layers from layer4.0 on"), std::string::npos) << report;
}

}  // namespace
}  // namespace bigtrain
