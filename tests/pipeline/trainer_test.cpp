// End-to-end training on generated canvases of real MNIST digits whose class is
// readable only at full resolution: it must learn, and a stopped-and-resumed run
// must end with exactly the weights of the uninterrupted one.
#include <gtest/gtest.h>
#include <string>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "kernels/core/error.hpp"
#include "net/batch_norm.hpp"
#include "net/model.hpp"
#include "net/safetensors.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/dataset.hpp"
#include "pipeline/data/demo_data.hpp"
#include "pipeline/engine/bn_calibration.hpp"
#include "pipeline/plan/plan.hpp"
#include "pipeline/plan/recompute_split.hpp"
#include "pipeline/infer/infer.hpp"
#include "pipeline/train/teacher_tiles.hpp"
#include "pipeline/train/trainer.hpp"
#include "tests/support/demo_dataset.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

class TrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = testing::fresh_scratch_dir("bigtrain_trainer_test");
    // 128-pixel canvases: at the 32-pixel size a resize baseline would see, a digit
    // is 7 pixels wide; the tiles see it at full resolution.
    testing::make_test_demo_data({.out = (root_ / "data").string(), .size = 128, .classes = {0, 1},
                                  .train = 80, .val = 40, .test = 0,
                                  .label_digits = 3, .other_digits = 0, .clutter_lines = 4,
                                  .block_size = 64, .seed = 3});
  }
  static void TearDownTestSuite() { if (!std::getenv("BIGTRAIN_KEEP_TEST_RUNS")) fs::remove_all(root_); }

  static Config config(const std::string& run, const std::vector<std::string>& extra = {},
                       const std::string& aggregator = "{kind: attention, hidden: 16}") {
    const std::string text = fmt::format(R"(data:
  train: {0}/train.csv
  val: {0}/val.csv
  mean: [0.1]
  std: [0.3]
tiler: {{tile: 64, overlap: 32, border: shift}}
model:
  preset: small
  in_channels: 1
  width: 0.25
  stem: {{kernel: 5, stride: 2, maxpool: false}}
aggregator: {2}
train:
  epochs: 8
  images_per_step: 4
  tile_batch: 9
  optimizer: adamw
  lr: 0.01
  # Frozen BatchNorm: a tile batch is one image here, and batch statistics of one
  # image normalise away what tells the classes apart (running statistics at
  # evaluation then disagree with training).
  freeze_bn: true
  weight_decay: 0.0001
  schedule: cosine
  seed: 11
device: {{type: cpu, threads: 2}}
output: {{dir: {1}}}
)",
                                         (root_ / "data").string(), (root_ / run).string(), aggregator);
    return parse_config(text, "trainer_test.yaml", extra);
  }

  static fs::path root_;
};
fs::path TrainerTest::root_;

TEST_F(TrainerTest, LearnsALabelVisibleOnlyAtFullResolution) {
  const auto started = std::chrono::steady_clock::now();
  Trainer trainer(config("learn"), false);
  const TrainOutcome outcome = trainer.run();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_FALSE(outcome.rows.empty());
  const EpochSummary& last_val = outcome.rows.back();
  ASSERT_EQ(last_val.split, "val");
  std::printf("learning test: validation accuracy %.3f after %lld epochs in %.1f s (compute waited %.1f%% of the last "
              "training epoch)\n",
              last_val.metrics.accuracy, static_cast<long long>(outcome.epochs_completed), seconds,
              100.0 * outcome.rows[outcome.rows.size() - 2].wait_seconds /
                  std::max(outcome.rows[outcome.rows.size() - 2].seconds, 1e-9));
  EXPECT_GT(*outcome.best_value, 0.9);
  EXPECT_GT(last_val.metrics.accuracy, 0.9);
  EXPECT_TRUE(fs::exists(root_ / "learn" / "metrics.csv"));
  EXPECT_TRUE(fs::exists(root_ / "learn" / "config.yaml"));
  EXPECT_TRUE(fs::exists(root_ / "learn" / "checkpoints" / "best.safetensors"));
  const auto metadata = net::read_safetensors(root_ / "learn" / "checkpoints" / "last.safetensors").metadata;
  EXPECT_EQ(metadata.at("classes"), "[\"0\",\"1\"]");
  EXPECT_EQ(metadata.at("epoch"), "8");
}

TEST_F(TrainerTest, ResumedRunEqualsTheUninterruptedOne) {
  const std::vector<std::string> short_run = {"train.epochs=3", "train.augmentation.flips=true",
                                              "train.augmentation.noise=0.05", "tiler.max_tiles_per_image=6",
                                              "aggregator.dropout=0.2"};
  {
    Trainer whole(config("whole", short_run), false);
    whole.run();
  }
  {
    Trainer first(config("resumed", short_run), false);
    first.set_epoch_limit(1);
    EXPECT_EQ(first.run().epochs_completed, 1);
  }
  {
    Trainer rest(config("resumed", short_run), true);
    EXPECT_EQ(rest.run().epochs_completed, 3);
  }
  for (const char* name : {"last.safetensors", "last.training.safetensors"}) {
    const auto a = net::read_safetensors(root_ / "whole" / "checkpoints" / name);
    const auto b = net::read_safetensors(root_ / "resumed" / "checkpoints" / name);
    ASSERT_EQ(a.tensors.size(), b.tensors.size()) << name;
    for (const auto& [key, tensor] : a.tensors) {
      ASSERT_TRUE(b.tensors.contains(key)) << key;
      EXPECT_EQ(tensor.bytes, b.tensors.at(key).bytes) << name << ": " << key << " differs after resuming";
    }
  }
  // Resuming a run that is not there, or starting over one that is, is refused.
  EXPECT_THROW(Trainer(config("nowhere", short_run), true), Error);
  EXPECT_THROW(Trainer(config("whole", short_run), false), Error);
}

std::int64_t steps_taken(const fs::path& run) {
  const auto state = net::read_safetensors(run / "checkpoints" / "last.training.safetensors");
  std::int32_t steps = 0;
  const auto& bytes = state.tensors.at("steps_taken").bytes;
  EXPECT_EQ(bytes.size(), sizeof(steps));
  std::memcpy(&steps, bytes.data(), sizeof(steps));
  return steps;
}

// train.step_every_batch: an update after every mixed tile batch, many more than one
// per images_per_step images, at the same rates (the schedule counts image groups).
TEST_F(TrainerTest, StepEveryBatchUpdatesPerBatchOnTheGroupsSchedule) {
  const std::vector<std::string> mixed = {"train.epochs=2", "train.mix_tiles=true", "train.freeze_bn=false",
                                          "tiler.max_tiles_per_image=6"};
  std::vector<std::string> per_batch = mixed;
  per_batch.push_back("train.step_every_batch=true");
  Trainer groups(config("per_group", mixed, "{kind: instance}"), false);
  const TrainOutcome grouped = groups.run();
  Trainer batches(config("per_batch", per_batch, "{kind: instance}"), false);
  const TrainOutcome batched = batches.run();
  // 80 images, 4 a step: 20 steps an epoch; each step's ~24 tiles come in batches of
  // at most 4 (one tile of each image).
  EXPECT_EQ(steps_taken(root_ / "per_group"), 40);
  EXPECT_GE(steps_taken(root_ / "per_batch"), 40 * 4);
  ASSERT_EQ(grouped.rows.size(), batched.rows.size());
  std::size_t train_rows = 0;
  for (std::size_t i = 0; i < grouped.rows.size(); ++i) {
    if (grouped.rows[i].split != "train") continue;
    EXPECT_DOUBLE_EQ(batched.rows[i].learning_rate, grouped.rows[i].learning_rate) << "epoch " << grouped.rows[i].epoch;
    EXPECT_GT(batched.rows[i].learning_rate, 0.0);
    ++train_rows;
  }
  EXPECT_EQ(train_rows, 2u);
}

// train.encoder_lr_scale: 0 trains the head alone (frozen BatchNorm keeps the
// statistics too), so two probes at different rates share every encoder tensor, the
// initial one, and differ in the head; a run at the full rate moves the encoder.
TEST_F(TrainerTest, EncoderLrScaleZeroTrainsTheHeadAlone) {
  const std::vector<std::string> probe = {"train.epochs=1", "train.encoder_lr_scale=0"};
  std::vector<std::string> faster = probe, whole = {"train.epochs=1"};
  faster.push_back("train.lr=0.02");
  Trainer(config("probe_a", probe), false).run();
  Trainer(config("probe_b", faster), false).run();
  Trainer(config("probe_whole", whole), false).run();
  const auto a = net::read_safetensors(root_ / "probe_a" / "checkpoints" / "last.safetensors");
  const auto b = net::read_safetensors(root_ / "probe_b" / "checkpoints" / "last.safetensors");
  const auto w = net::read_safetensors(root_ / "probe_whole" / "checkpoints" / "last.safetensors");
  std::size_t encoder_tensors = 0, encoder_moved = 0;
  for (const auto& [key, tensor] : a.tensors) {
    ASSERT_TRUE(b.tensors.contains(key)) << key;
    const bool head = key.starts_with("fc.");
    if (head) {
      EXPECT_NE(tensor.bytes, b.tensors.at(key).bytes) << key << ": the head trains";
    } else if (!key.starts_with("aggregator.")) {
      EXPECT_EQ(tensor.bytes, b.tensors.at(key).bytes) << key << ": a frozen encoder tensor moved";
      ++encoder_tensors;
      if (key.ends_with("weight") && tensor.bytes != w.tensors.at(key).bytes) ++encoder_moved;
    }
  }
  EXPECT_GT(encoder_tensors, 4u);
  EXPECT_GT(encoder_moved, 2u) << "at the full rate the encoder's weights move";
}

// train.bn_calibration_images with pretraining in the same run: the statistics are
// estimated after the pretext (whose BatchNorm trains in batch statistics and would
// otherwise leave its own running averages of the augmented views). The encoder is
// held still in training (encoder_lr_scale 0, frozen BatchNorm), so the checkpoint's
// statistics must be a calibration of its own weights over every training image.
TEST_F(TrainerTest, BatchNormCalibrationFollowsPretraining) {
  const Config c = config("calibrated_after_pretext",
                          {"train.epochs=1", "train.encoder_lr_scale=0", "train.bn_calibration_images=80",
                           "pretrain.epochs=1", "pretrain.method=contrastive", "pretrain.tile_batch=8"});
  Trainer(c, false).run();

  YAML::Node model_node = YAML::Clone(c.model);
  model_node["num_classes"] = 2;
  net::Model model(net::model_spec_from_yaml(model_node, c.source), 0);
  net::StateDict state = net::read_safetensors(root_ / "calibrated_after_pretext" / "checkpoints" / "last.safetensors").tensors;
  std::erase_if(state, [](const auto& entry) { return entry.first.starts_with("aggregator."); });
  model.load_state_dict(state);
  std::vector<std::vector<float>> means, vars;
  std::vector<net::BatchNorm2d*> layers;
  for (std::size_t i = 0; i < model.encoder().size(); ++i)
    if (auto* bn = dynamic_cast<net::BatchNorm2d*>(&model.encoder().at(i))) {
      layers.push_back(bn);
      means.push_back(bn->running_mean().value.to_vector());
      vars.push_back(bn->running_var().value.to_vector());
    }
  ASSERT_GT(layers.size(), 2u);
  const BnCalibration again =
      calibrate_batch_norm(model.encoder(), Backend::cpu, c, load_dataset(c.data, 0).train, 80, 1);
  ASSERT_EQ(again.images, 80);
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::vector<float> mean = layers[l]->running_mean().value.to_vector();
    const std::vector<float> var = layers[l]->running_var().value.to_vector();
    for (std::size_t k = 0; k < mean.size(); ++k) {
      // Every image once either way; only the order of the float sums differs.
      const double scale = std::abs(mean[k]) + std::sqrt(var[k]) + 1e-6;
      EXPECT_NEAR(means[l][k], mean[k], 1e-4 * scale) << "BatchNorm " << l << " channel " << k;
      EXPECT_NEAR(vars[l][k], var[k], 1e-4 * var[k] + 1e-7) << "BatchNorm " << l << " channel " << k;
    }
  }
}


// checkpoints/pretrained.safetensors holds the encoder as pretraining and calibration
// left it, so a run started from it with no pretext of its own trains exactly the
// run that pretrained: the final weights are the same bytes.
TEST_F(TrainerTest, PretrainedCheckpointStartsTheSameTraining) {
  const std::vector<std::string> training = {"train.epochs=1", "train.bn_calibration_images=40"};
  std::vector<std::string> pretraining = training;
  pretraining.insert(pretraining.end(), {"pretrain.epochs=1", "pretrain.method=contrastive", "pretrain.tile_batch=8"});
  Trainer(config("pretrains", pretraining), false).run();
  const fs::path pretrained = root_ / "pretrains" / "checkpoints" / "pretrained.safetensors";
  ASSERT_TRUE(fs::exists(pretrained));
  std::vector<std::string> reused = training;
  reused.push_back("model.pretrained=" + pretrained.string());
  Trainer(config("reuses", reused), false).run();

  const auto whole = net::read_safetensors(root_ / "pretrains" / "checkpoints" / "last.safetensors");
  const auto from_file = net::read_safetensors(root_ / "reuses" / "checkpoints" / "last.safetensors");
  const auto before_training = net::read_safetensors(pretrained);
  ASSERT_EQ(whole.tensors.size(), from_file.tensors.size());
  std::size_t trained = 0;
  for (const auto& [key, tensor] : whole.tensors) {
    ASSERT_TRUE(from_file.tensors.contains(key)) << key;
    // The reusing run calibrates again at its start (same weights, same images, same
    // statistics); only this counter, which no computation reads, counts it twice.
    if (key.ends_with("num_batches_tracked")) continue;
    EXPECT_EQ(tensor.bytes, from_file.tensors.at(key).bytes) << key;
    if (tensor.bytes != before_training.tensors.at(key).bytes) ++trained;
  }
  EXPECT_GT(trained, 4u) << "the checkpoint is from before the labelled epoch, not after it";
}


// train.memory_budget: pass 1 keeps some or all of an image's tile batches, or the
// encoder's last layers of each, and pass 2 recomputes the rest; with BatchNorm
// statistics of each batch (no convolution and BatchNorm folding in pass 1) the
// weights after two epochs are those of the run that recomputes everything, bit for bit.
TEST_F(TrainerTest, MemoryBudgetKeepsBatchesAndTrainsTheSameWeights) {
  const std::vector<std::string> base = {"train.epochs=2", "train.freeze_bn=false", "train.tile_batch=4"};
  auto with = [&](const std::string& budget) {
    std::vector<std::string> overrides = base;
    overrides.push_back("train.memory_budget=" + budget);
    return overrides;
  };
  // The budget that keeps exactly one batch (9 tiles an image: batches of 4, 4, 1).
  const RecomputeSplit unit = recompute_split(plan_training(plan_inputs_from_config(config("plan", base), Backend::cpu)),
                                              0);
  ASSERT_GT(unit.kept_per_batch, 0u);
  const std::size_t one_batch = unit.recompute_peak + unit.kept_per_batch + unit.kept_per_batch / 2;
  EXPECT_EQ(recompute_split(plan_training(plan_inputs_from_config(config("plan", base), Backend::cpu)), one_batch)
                .kept_batches,
            1);
  // A budget for a tail of every batch and no whole batch: the tail from the middle
  // of the encoder, 3 batches of it.
  ASSERT_GE(unit.tails.size(), 3u);
  const net::EncoderPlan::Tail& tail = unit.tails[unit.tails.size() / 2];
  const std::size_t tails_only = unit.recompute_peak + 3 * tail.kept_bytes;
  ASSERT_LT(3 * tail.kept_bytes, unit.kept_per_batch) << tail.first;
  const ImageKeep tail_keep =
      image_keep(recompute_split(plan_training(plan_inputs_from_config(config("plan", base), Backend::cpu)), tails_only),
                 9, 4);
  EXPECT_EQ(tail_keep.kept_batches, 0);
  EXPECT_EQ(tail_keep.tail_first, tail.first);
  const std::vector<std::pair<std::string, std::string>> runs = {{"budget_none", "0"},
                                                                 {"budget_one", std::to_string(one_batch)},
                                                                 {"budget_tails", std::to_string(tails_only)},
                                                                 {"budget_all", "4GiB"}};
  for (const auto& [run, budget] : runs) {
    Trainer trainer(config(run, with(budget)), false);
    trainer.run();
  }
  const auto reference = net::read_safetensors(root_ / "budget_none" / "checkpoints" / "last.safetensors");
  for (const char* run : {"budget_one", "budget_tails", "budget_all"}) {
    const auto kept = net::read_safetensors(root_ / run / "checkpoints" / "last.safetensors");
    ASSERT_EQ(kept.tensors.size(), reference.tensors.size()) << run;
    for (const auto& [key, tensor] : reference.tensors)
      EXPECT_EQ(tensor.bytes, kept.tensors.at(key).bytes) << run << ": " << key << " differs from recomputing all";
  }
}

// train.teacher: training reads only the tiles the teacher's attention ranks highest
// (the same ones bigtrain infer's per-tile attention puts first), evaluation every tile.
TEST_F(TrainerTest, TeacherPicksTheTilesTrainingReads) {
  const std::vector<std::string> one_epoch = {"train.epochs=1"};
  const TrainOutcome teacher_run = Trainer(config("teacher", one_epoch), false).run();
  const std::string teacher = (root_ / "teacher" / "checkpoints" / "last.safetensors").string();
  std::vector<std::string> student_overrides = one_epoch;
  student_overrides.push_back("train.teacher.checkpoint=" + teacher);
  student_overrides.push_back("train.teacher.top=2");
  const Config student_config = config("student", student_overrides);

  // The selection, against the teacher's attention as inference reports it.
  Trainer student(student_config, false);
  const std::vector<Sample>& train = student.dataset().train;
  const auto selected = select_tiles_by_teacher(student_config, train, student.dataset().classes, Backend::cpu);
  ASSERT_EQ(selected.size(), train.size());
  LoadedCheckpoint loaded = load_checkpoint_for_inference(teacher);
  InferenceEngine engine(loaded, {.backend = Backend::cpu, .tile_results = true});
  std::vector<InferenceItem> items;
  for (std::size_t i = 0; i < 6; ++i) items.push_back({train[i].path, train[i].label});
  std::size_t checked = 0;
  engine.run(items, [&](ImagePrediction&& p) {
    ASSERT_TRUE(p.ok()) << p.error;
    std::vector<TileResult> ranked = p.tile_results;
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const TileResult& a, const TileResult& b) { return a.attention > b.attention; });
    ASSERT_GE(ranked.size(), 3u);
    ASSERT_GT(ranked[1].attention, ranked[2].attention) << "a tie at the cut would make the choice arbitrary";
    const std::vector<cv::Rect>& chosen = selected[p.index];
    ASSERT_EQ(chosen.size(), 2u) << p.path;
    for (int k = 0; k < 2; ++k)
      EXPECT_NE(std::find(chosen.begin(), chosen.end(), ranked[static_cast<std::size_t>(k)].rect), chosen.end())
          << p.path << ": attention rank " << k << " not selected";
    ++checked;
  });
  EXPECT_EQ(checked, items.size());

  const TrainOutcome student_run = student.run();
  ASSERT_GE(teacher_run.rows.size(), 2u);
  ASSERT_GE(student_run.rows.size(), 2u);
  const EpochSummary& all_train = teacher_run.rows[0];
  const EpochSummary& picked_train = student_run.rows[0];
  ASSERT_EQ(all_train.split, "train");
  ASSERT_EQ(picked_train.split, "train");
  // 9 tiles an image (3 x 3 tiles of 64 every 32 on 128^2 canvases), 2 picked.
  EXPECT_EQ(picked_train.tiles * 9, all_train.tiles * 2);
  EXPECT_EQ(student_run.rows[1].tiles, teacher_run.rows[1].tiles) << "validation reads every tile";
}

// A frozen encoder (encoder_lr_scale 0, frozen BatchNorm) skips pass 2: the aggregator
// and head train exactly as with pass 2 at a rate too small to move a float32 weight,
// and the encoder receives no gradient at all (diagnostics' gradients.csv).
TEST_F(TrainerTest, FrozenEncoderSkipsPassTwoAndTrainsTheSameHead) {
  const std::vector<std::string> base = {"train.epochs=1", "train.memory_budget=0", "train.diagnostics=true"};
  std::vector<std::string> frozen = base, negligible = base;
  frozen.push_back("train.encoder_lr_scale=0");
  negligible.push_back("train.encoder_lr_scale=1e-30");
  Trainer(config("frozen_skip", frozen), false).run();
  Trainer(config("frozen_pass2", negligible), false).run();
  const auto skip = net::read_safetensors(root_ / "frozen_skip" / "checkpoints" / "last.safetensors");
  const auto pass2 = net::read_safetensors(root_ / "frozen_pass2" / "checkpoints" / "last.safetensors");
  ASSERT_EQ(skip.tensors.size(), pass2.tensors.size());
  std::size_t head_tensors = 0;
  for (const auto& [key, tensor] : skip.tensors) {
    const auto& other = pass2.tensors.at(key).bytes;
    if (key.starts_with("fc.") || key.starts_with("aggregator.")) {
      EXPECT_EQ(tensor.bytes, other) << key;
      ++head_tensors;
      continue;
    }
    // Zero-initialised encoder tensors (BatchNorm's shifts) do move at 1e-30 of the
    // rate, to ~1e-33: nothing the features can show.
    ASSERT_EQ(tensor.bytes.size(), other.size()) << key;
    for (std::size_t i = 0; i + 4 <= other.size(); i += 4) {
      float a = 0, b = 0;
      std::memcpy(&a, tensor.bytes.data() + i, 4);
      std::memcpy(&b, other.data() + i, 4);
      ASSERT_LE(std::fabs(a - b), 1e-25f) << key;
    }
  }
  EXPECT_GT(head_tensors, 2u);
  auto first_encoder_gradient = [&](const std::string& run) {
    std::ifstream csv(root_ / run / "gradients.csv");
    std::string header, row;
    std::getline(csv, header);
    std::getline(csv, row);
    EXPECT_NE(header.find("grad_conv1.weight"), std::string::npos) << header;
    // epoch,step,grad_conv1.weight,...
    const std::size_t a = row.find(',', row.find(',') + 1) + 1;
    return std::stod(row.substr(a, row.find(',', a) - a));
  };
  EXPECT_EQ(first_encoder_gradient("frozen_skip"), 0.0) << "pass 2 ran for a frozen encoder";
  EXPECT_GT(first_encoder_gradient("frozen_pass2"), 0.0);
}


TEST_F(TrainerTest, FrozenEncoderFeaturesAreKeptAndTrainTheSameWeights) {
  // Dropout after the aggregator draws per epoch: the kept features must not freeze it.
  const std::vector<std::string> base = {"train.epochs=3", "train.encoder_lr_scale=0", "aggregator.dropout=0.2",
                                         "train.diagnostics=true"};
  std::vector<std::string> uncached = base, augmented = base;
  uncached.push_back("train.feature_cache_mb=0");
  augmented.push_back("train.augmentation.noise=0.05");
  const TrainOutcome kept = Trainer(config("features_kept", base), false).run();
  const TrainOutcome encoded = Trainer(config("features_encoded", uncached), false).run();
  const TrainOutcome noisy = Trainer(config("features_augmented", augmented), false).run();
  ASSERT_EQ(kept.rows.size(), encoded.rows.size());
  for (std::size_t r = 0; r < kept.rows.size(); ++r) {
    const EpochSummary &a = kept.rows[r], &b = encoded.rows[r];
    SCOPED_TRACE(a.split + " epoch " + std::to_string(a.epoch));
    EXPECT_EQ(a.metrics.loss, b.metrics.loss);
    EXPECT_EQ(a.tiles, b.tiles);
    EXPECT_GT(a.seconds, 0.0);
    EXPECT_EQ(b.tiles_encoded, b.tiles);
    // The first epoch and the test split read every tile; later epochs none.
    if (a.epoch == 1 || a.split == "test") EXPECT_EQ(a.tiles_encoded, a.tiles);
    else EXPECT_EQ(a.tiles_encoded, 0);
  }
  for (const EpochSummary& row : noisy.rows)
    if (row.split == "train") EXPECT_EQ(row.tiles_encoded, row.tiles) << "augmented inputs were served from the cache";
  const auto a = net::read_safetensors(root_ / "features_kept" / "checkpoints" / "last.safetensors");
  const auto b = net::read_safetensors(root_ / "features_encoded" / "checkpoints" / "last.safetensors");
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [key, tensor] : a.tensors) EXPECT_EQ(tensor.bytes, b.tensors.at(key).bytes) << key;
  auto text = [](const fs::path& file) {
    std::ifstream in(file);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string diagnostics = text(root_ / "features_kept" / "diagnostics.csv");
  EXPECT_GT(std::count(diagnostics.begin(), diagnostics.end(), '\n'), 3 * 80);
  EXPECT_EQ(diagnostics, text(root_ / "features_encoded" / "diagnostics.csv"));
}

}  // namespace
}  // namespace bigtrain
