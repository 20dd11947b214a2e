// tiler.mode stream through the pipeline: the tiler's region reads feeding the
// streamed trunk give the whole-image network's logits, loss and every gradient; the
// config and the step refuse what cannot be streamed; the trainer learns in this mode
// and `infer` reads its checkpoint.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <string>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "tests/support/error_of.hpp"
#include "kernels/core/allocator.hpp"
#include "kernels/core/error.hpp"
#include "kernels/cross_entropy.hpp"
#include "net/aggregator.hpp"
#include "net/map_cells.hpp"
#include "net/model.hpp"
#include "net/model_spec.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/image_region_reader.hpp"
#include "pipeline/engine/stream_step.hpp"
#include "pipeline/infer/infer.hpp"
#include "pipeline/plan/plan.hpp"
#include "pipeline/train/trainer.hpp"
#include "tests/support/demo_dataset.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

using testing::error_of;

net::ModelSpec small_spec() {
  return net::model_spec_from_yaml(
      YAML::Load("preset: small\nin_channels: 1\nwidth: 0.25\nnum_classes: 2\nstem: {kernel: 5, stride: 2, "
                 "maxpool: false}"),
      "stream_mode_test");
}

Preprocessing grey_preprocessing() {
  Preprocessing p;
  p.channels = 1;
  p.mean = {0.1f};
  p.std = {0.3f};
  return p;
}

// max |a - b| / max |b|
double relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to(Device::cpu()).to_vector(), y = b.to(Device::cpu()).to_vector();
  EXPECT_EQ(x.size(), y.size());
  double worst = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::abs(static_cast<double>(y[i])));
  }
  return scale > 0 ? worst / scale : worst;
}

class StreamMode : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = testing::fresh_scratch_dir("bigtrain_stream_mode_test");
    testing::make_test_demo_data({.out = (root_ / "data").string(), .size = 128, .classes = {0, 1},
                                  .train = 80, .val = 40, .test = 0,
                                  .label_digits = 3, .other_digits = 0, .clutter_lines = 4,
                                  .block_size = 64, .seed = 3});
    // An image that is not a multiple of the streaming tile, for the exactness check.
    testing::make_test_demo_data({.out = (root_ / "odd").string(), .size = 150, .classes = {0, 1},
                                  .train = 2, .val = 0, .test = 0, .label_digits = 3, .other_digits = 0,
                                  .clutter_lines = 4, .block_size = 64, .seed = 5});
    testing::make_test_demo_data({.out = (root_ / "large").string(), .size = 520, .classes = {0, 1},
                                  .train = 2, .val = 0, .test = 0, .label_digits = 3, .other_digits = 0,
                                  .clutter_lines = 4, .block_size = 128, .seed = 7});
  }
  static void TearDownTestSuite() { if (!std::getenv("BIGTRAIN_KEEP_TEST_RUNS")) fs::remove_all(root_); }

  static std::string config_text(const std::string& run) {
    return fmt::format(R"(data:
  train: {0}/train.csv
  val: {0}/val.csv
  mean: [0.1]
  std: [0.3]
tiler: {{mode: stream, tile: 64}}
model:
  preset: small
  in_channels: 1
  width: 0.25
  stem: {{kernel: 5, stride: 2, maxpool: false}}
aggregator: {{kind: attention, hidden: 16}}
train:
  epochs: 4
  images_per_step: 4
  optimizer: adamw
  lr: 0.01
  freeze_bn: true
  weight_decay: 0.0001
  schedule: cosine
  seed: 11
device: {{type: cpu, threads: 2}}
output: {{dir: {1}}}
)",
                       (root_ / "data").string(), (root_ / run).string());
  }

  static fs::path root_;
};
fs::path StreamMode::root_;

TEST_F(StreamMode, ConfigRefusesBatchNormThatIsNotFrozen) {
  const std::string message = error_of([] {
    parse_config(config_text("unfrozen"), "stream.yaml", {"train.freeze_bn=false"});
  });
  EXPECT_NE(message.find("train.freeze_bn=false"), std::string::npos) << message;  // the override that set it
  EXPECT_NE(message.find("freeze_bn"), std::string::npos) << message;
  EXPECT_NE(message.find("tiler.mode stream"), std::string::npos) << message;
  // And what is drawn per tile or per instance.
  EXPECT_NE(error_of([] { parse_config(config_text("x"), "s.yaml", {"aggregator.kind=instance"}); }).find("instance"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_config(config_text("x"), "s.yaml", {"train.augmentation.flips=true"}); })
                .find("augmentation"),
            std::string::npos);
  EXPECT_NO_THROW(parse_config(config_text("x"), "s.yaml"));
}

TEST_F(StreamMode, StepRefusesATrunkLayerThatCannotBeStreamedNamingIt) {
  net::Model model(small_spec(), 1);
  auto aggregator = net::make_aggregator({net::AggregatorKind::mean}, model.encoder().feature_dim(), 1);
  const ImageModel image_model{&model.encoder(), aggregator.get(), &model.head()};
  const std::string message = error_of([&] {
    StreamStep step(image_model, {.backend = Backend::cpu, .tile = 64, .freeze_bn = false});
  });
  EXPECT_NE(message.find("batch norm `"), std::string::npos) << message;
  EXPECT_NE(message.find("tiler.mode stream"), std::string::npos) << message;
  EXPECT_NO_THROW(StreamStep(image_model, {.backend = Backend::cpu, .tile = 64, .freeze_bn = true}));
}

// The tiler's region reads through the streamed trunk, then the attention over the
// map's cells, equal the network run on the whole image read at once.
TEST_F(StreamMode, StreamedLogitsAndGradientsEqualTheWholeImage) {
  const Backend backend = Backend::reference;  // sums in double: exact up to summation order
  net::Model model(small_spec(), 7);
  auto aggregator = net::make_aggregator({net::AggregatorKind::attention, 16, true, 0.0f},
                                         model.encoder().feature_dim(), 3);
  const ImageModel image_model{&model.encoder(), aggregator.get(), &model.head()};
  TilerConfig tiler;
  tiler.mode = TilerMode::stream;
  tiler.tile = 64;
  ImageRegionReader reader((root_ / "odd" / "train" / "00000.tif").string(), tiler, grey_preprocessing());
  ASSERT_EQ(reader.image_shape(), (Shape{1, 1, 150, 150}));
  const int label = 1;

  StreamStep step(image_model, {.backend = backend, .tile = 64, .freeze_bn = true});
  image_model.zero_grad();
  const ImageOutcome streamed = step.train_image(reader, label, 0, 1.0f);
  EXPECT_GE(step.last_plan().tiles.size(), 4u);  // really cut into tiles
  EXPECT_GT(reader.pixels_read(), 150 * 150);    // and each read with its halo
  std::map<std::string, Tensor> streamed_grads;
  for (net::Parameter* p : image_model.parameters()) streamed_grads[p->name] = p->grad.clone();

  // The whole image at once: every encoder layer but the global pooling, the cells,
  // the aggregator, the head.
  image_model.zero_grad();
  net::ForwardContext ctx = net::ForwardContext::train(backend);
  ctx.freeze_bn = true;
  ctx.update_bn_running_stats = false;
  net::Encoder& encoder = model.encoder();
  Tensor map = reader.read({0, 0, 150, 150});
  for (std::size_t i = 0; i + 1 < encoder.size(); ++i) map = encoder.at(i).forward(map, ctx);
  const Tensor logits = model.head().forward(aggregator->forward(net::map_cells(map), ctx), ctx);
  Tensor targets = Tensor::empty({1}, DType::i32);
  targets.data<std::int32_t>()[0] = label;
  Tensor dlogits = Tensor::empty(logits.shape());
  Tensor probabilities = Tensor::empty(logits.shape());
  const float whole_loss = kernels::cross_entropy(backend, logits, targets, nullptr, {}, dlogits, &probabilities);
  Tensor dmap = net::map_from_cells(aggregator->backward(model.head().backward(dlogits)), map.shape());
  for (std::size_t i = encoder.size() - 1; i-- > 0;) dmap = encoder.at(i).backward(dmap);

  EXPECT_NEAR(streamed.loss, whole_loss, 1e-6f * std::max(1.0f, whole_loss));
  const std::vector<float> p = probabilities.to_vector();
  ASSERT_EQ(streamed.probabilities.size(), p.size());
  for (std::size_t k = 0; k < p.size(); ++k) EXPECT_NEAR(streamed.probabilities[k], p[k], 1e-6f);
  double worst = 0.0;
  std::string worst_name;
  for (net::Parameter* parameter : image_model.parameters()) {
    const double error = relative_error(streamed_grads.at(parameter->name), parameter->grad);
    if (error >= worst) worst = error, worst_name = parameter->name;
  }
  std::printf("[stream mode] pipeline reads, 150x150, tile 64, %zu tiles: loss %.7f vs %.7f, worst gradient %.2e (%s)\n",
              step.last_plan().tiles.size(), streamed.loss, whole_loss, worst, worst_name.c_str());
  EXPECT_LE(worst, 1e-5) << worst_name;
  EXPECT_GT(streamed_grads.size(), 10u);
}

// `bigtrain plan` for a stream config: the trunk's tiles and halo overhead as the
// step runs them, and its step memory within 20% of the allocator's measured peak.
TEST_F(StreamMode, PlanPredictsTheStreamedStep) {
  const Config config = parse_config(config_text("plan"), "stream_mode_test.yaml",
                                     {"model.preset=resnet18", "model.width=0.125", "model.stem.kernel=7",
                                      "model.stem.maxpool=true", "tiler.tile=128", "data.classes=[\"0\", \"1\"]"});
  PlanInputs inputs = plan_inputs_from_config(config, Backend::cpu);
  inputs.image_width = 520, inputs.image_height = 520;
  const TrainingPlan plan = plan_training(inputs);
  ASSERT_TRUE(plan.stream.has_value());

  net::ModelSpec spec = inputs.model;
  net::Model model(spec, 3);
  auto aggregator = net::make_aggregator(inputs.aggregator, model.encoder().feature_dim(), 3);
  const ImageModel image_model{&model.encoder(), aggregator.get(), &model.head()};
  StreamStep step(image_model, {.backend = Backend::cpu, .tile = 128, .freeze_bn = true});
  ImageRegionReader reader((root_ / "large" / "train" / "00000.tif").string(), config.tiler, grey_preprocessing());
  Allocator& host = allocator_for(Device::cpu());
  image_model.zero_grad();
  step.train_image(reader, 0, 0, 1.0f);  // first: the parameters' gradients are allocated
  host.release_cached();
  host.reset_peak();
  const std::size_t before = host.stats().current_bytes;
  step.train_image(reader, 0, 0, 1.0f);
  const std::size_t measured = host.stats().peak_bytes - before;
  const net::StreamMemory& planned = plan.stream->memory;
  std::printf("[stream mode] plan: %lld tiles, halo overhead %.2f, step %.2f MiB planned, %.2f MiB measured\n",
              static_cast<long long>(plan.stream->tiles), plan.stream->halo_overhead, planned.step_peak / 1048576.0,
              measured / 1048576.0);
  EXPECT_EQ(plan.stream->tiles, static_cast<std::int64_t>(step.last_plan().tiles.size()));
  EXPECT_DOUBLE_EQ(plan.stream->halo_overhead, step.last_plan().halo_overhead());
  EXPECT_GT(plan.stream->halo_overhead, 1.5);
  EXPECT_NEAR(static_cast<double>(measured), static_cast<double>(planned.step_peak), 0.2 * planned.step_peak);
}

TEST_F(StreamMode, TrainsLossFallsAndInferReadsTheCheckpoint) {
  Trainer trainer(parse_config(config_text("learn"), "stream_mode_test.yaml"), false);
  const TrainOutcome outcome = trainer.run();
  std::vector<const EpochSummary*> train_rows, val_rows;
  for (const EpochSummary& row : outcome.rows) (row.split == "train" ? train_rows : val_rows).push_back(&row);
  ASSERT_EQ(train_rows.size(), 4u);
  ASSERT_EQ(val_rows.size(), 4u);
  std::printf("[stream mode] train loss %.4f -> %.4f, val accuracy %.3f -> %.3f, %lld streaming tiles per epoch\n",
              train_rows.front()->metrics.loss, train_rows.back()->metrics.loss, val_rows.front()->metrics.accuracy,
              val_rows.back()->metrics.accuracy, static_cast<long long>(train_rows.back()->tiles));
  EXPECT_LT(train_rows.back()->metrics.loss, 0.8 * train_rows.front()->metrics.loss);
  EXPECT_EQ(train_rows.back()->tiles, 80 * 4);  // 128x128 at tile 64: 2x2 streaming tiles an image

  // `bigtrain infer`'s engine on the best checkpoint: the validation accuracy the
  // trainer recorded for that epoch, and one tile result per feature map cell.
  LoadedCheckpoint checkpoint =
      load_checkpoint_for_inference((root_ / "learn" / "checkpoints" / "best.safetensors").string());
  EXPECT_EQ(checkpoint.tiler.mode, TilerMode::stream);
  InferenceEngine engine(checkpoint, {.backend = Backend::cpu, .tile_results = true});
  const Dataset& dataset = trainer.dataset();
  std::vector<InferenceItem> items;
  for (const Sample& sample : dataset.val) items.push_back({sample.path, sample.label});
  std::int64_t correct = 0;
  engine.run(items, [&](ImagePrediction&& p) {
    ASSERT_TRUE(p.ok()) << p.error;
    correct += p.top_class == items[p.index].label;
    EXPECT_EQ(p.tile_results.size(), p.plan->tiles.size());
    EXPECT_EQ(p.tile_results.size(), 8u * 8u);  // 128 pixels at the small trunk's stride 16
    for (const TileResult& r : p.tile_results) EXPECT_TRUE(std::isfinite(r.attention));
  });
  double best_accuracy = -1.0;
  for (const EpochSummary* row : val_rows)
    if (row->epoch == outcome.best_epoch) best_accuracy = row->metrics.accuracy;
  EXPECT_DOUBLE_EQ(static_cast<double>(correct) / static_cast<double>(items.size()), best_accuracy);
}

}  // namespace
}  // namespace bigtrain
