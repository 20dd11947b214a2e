#include "pipeline/trainer.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kernels/core/allocator.hpp"
#include "kernels/core/error.hpp"
#include "kernels/device_select.hpp"
#include "kernels/upload.hpp"
#include "net/grad_clip.hpp"
#include "net/model.hpp"
#include "net/optimizer.hpp"
#include "pipeline/atomic_file.hpp"
#include "pipeline/bn_calibration.hpp"
#include "pipeline/checkpoint.hpp"
#include "pipeline/distributed.hpp"
#include "pipeline/distributed_training.hpp"
#include "pipeline/random.hpp"
#include "pipeline/report.hpp"
#include "pipeline/tile_stream.hpp"
#include "pipeline/two_pass.hpp"

namespace bigtrain {
namespace fs = std::filesystem;
namespace {

// Purposes mixed into the run seed, so each kind of draw has its own stream.
enum Stream : std::uint64_t { kOrder = 1, kSubsample = 2, kAugment = 3, kDropout = 4, kInit = 5, kBnCalibration = 6 };

std::int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::string format_optional(const std::optional<double>& value) {
  return value ? fmt::format("{:.6f}", *value) : std::string();
}

double metric_value(const ClassificationMetrics& m, const std::string& name) {
  if (name == "val_accuracy") return m.accuracy;
  if (name == "val_balanced_accuracy") return m.balanced_accuracy;
  if (name == "val_loss") return m.loss;
  if (name == "val_auc") return m.auc.value_or(0.5);
  throw Error(fmt::format("unknown best_metric '{}'", name));
}

std::string duration_text(double seconds) {
  const auto s = static_cast<long>(std::max(0.0, seconds));
  return fmt::format("{:02d}:{:02d}", s / 60, s % 60);
}

}  // namespace

struct Trainer::State {
  Config config;
  bool resume = false;
  fs::path run_dir;
  Dataset dataset;
  std::unique_ptr<net::Model> model;
  std::unique_ptr<net::Aggregator> aggregator;
  std::unique_ptr<net::Optimizer> optimizer;
  std::unique_ptr<TwoPassStep> step;
  ImageModel image_model;
  Backend backend = Backend::cpu;
  std::int64_t epochs_done = 0;
  std::optional<double> best_value;
  std::int64_t best_epoch = 0;
  std::int64_t epochs_without_improvement = 0;
  std::string metrics_csv;  // whole file, rewritten each epoch
  bool tty = false;

  std::uint64_t seed(std::uint64_t purpose, std::uint64_t epoch = 0, std::uint64_t image = 0) const {
    return mix_seed(config.train.seed, purpose, epoch, image);
  }
  std::int64_t steps_per_epoch() const {
    const auto n = static_cast<std::int64_t>(dataset.train.size());
    return (n + config.train.images_per_step - 1) / config.train.images_per_step;
  }
  std::vector<net::StateRefs> state_refs() const { return {model->state(), aggregator->state()}; }
  net::Metadata checkpoint_metadata() const;
  void write_checkpoints(bool best);
  EpochSummary train_epoch(std::int64_t epoch);
  EpochSummary evaluate(const std::vector<Sample>& split, const std::string& name, std::int64_t epoch);
  void append_metrics(const EpochSummary& row);
};

net::Metadata Trainer::State::checkpoint_metadata() const {
  net::Metadata metadata;
  metadata["config"] = config_to_yaml(config);
  metadata["model"] = net::to_yaml_string(model->spec());
  metadata["aggregator"] = nlohmann::json{{"kind", config.aggregator.kind},
                                          {"hidden", config.aggregator.hidden},
                                          {"gated", config.aggregator.gated},
                                          {"dropout", config.aggregator.dropout}}
                               .dump();
  metadata["classes"] = nlohmann::json(dataset.classes).dump();
  metadata["normalization"] = nlohmann::json{{"mean", config.data.mean}, {"std", config.data.std}}.dump();
  metadata["tiler"] = nlohmann::json{{"mode", config.tiler.mode},        {"tile", config.tiler.tile},
                                     {"overlap", config.tiler.overlap},  {"border", config.tiler.border},
                                     {"level", config.tiler.level},      {"downsample", config.tiler.downsample},
                                     {"resize_size", config.tiler.resize_size}}
                          .dump();
  metadata["epoch"] = std::to_string(epochs_done);
  return metadata;
}

void Trainer::State::write_checkpoints(bool best) {
  // Rank 0 writes for all (the ranks' weights are identical); the barrier keeps the
  // others from loading best.safetensors (before the test split) before it exists.
  if (!world().is_root()) return world().barrier();
  const fs::path dir = run_dir / "checkpoints";
  fs::create_directories(dir);
  net::Metadata metadata = checkpoint_metadata();
  net::Metadata training;
  training["epochs_done"] = std::to_string(epochs_done);
  training["best_value"] = best_value ? fmt::format("{:.17g}", *best_value) : "";
  training["best_epoch"] = std::to_string(best_epoch);
  training["epochs_without_improvement"] = std::to_string(epochs_without_improvement);
  training["seed"] = std::to_string(config.train.seed);
  // Each file is replaced atomically, but not both at once: both name their epoch,
  // and resume refuses a pair that disagrees (a crash between the two writes).
  save_model_checkpoint((dir / "last.safetensors").string(), *model, *aggregator, metadata);
  save_training_state((dir / "last.training.safetensors").string(), *optimizer, training);
  if (best) {
    save_model_checkpoint((dir / "best.safetensors").string(), *model, *aggregator, metadata);
  }
  world().barrier();
}

void Trainer::State::append_metrics(const EpochSummary& row) {
  if (!world().is_root()) return;  // rows hold every rank's images (gathered)
  const auto& m = row.metrics;
  if (metrics_csv.empty()) {
    metrics_csv = "epoch,split,loss,accuracy,balanced_accuracy,auc,images,tiles,seconds,images_per_s,tiles_per_s,"
                  "wait_fraction,peak_allocated_bytes,peak_rss_bytes,lr";
    for (const auto& name : dataset.classes) metrics_csv += ",recall_" + name;
    metrics_csv += "\n";
  }
  const double seconds = std::max(row.seconds, 1e-9);
  metrics_csv += fmt::format("{},{},{:.6f},{:.6f},{:.6f},{},{},{},{:.3f},{:.3f},{:.3f},{:.4f},{},{},{:.8g}", row.epoch,
                             row.split, m.loss, m.accuracy, m.balanced_accuracy, format_optional(m.auc), m.images,
                             row.tiles, row.seconds, static_cast<double>(m.images) / seconds,
                             static_cast<double>(row.tiles) / seconds, row.wait_seconds / seconds,
                             row.peak_allocated_bytes, row.peak_rss_bytes, row.learning_rate);
  for (double recall : m.recall) metrics_csv += std::isnan(recall) ? std::string(",") : fmt::format(",{:.6f}", recall);
  metrics_csv += "\n";
  write_file_atomically((run_dir / "metrics.csv").string(), metrics_csv);
  update_run_outputs(run_dir.string(), dataset);  // report.html + TensorBoard scalars (issue 10)
}

EpochSummary Trainer::State::train_epoch(std::int64_t epoch) {
  const auto& train = dataset.train;
  const auto e = static_cast<std::uint64_t>(epoch);
  std::vector<std::size_t> order(train.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  SplitMix64 order_rng(seed(kOrder, e));
  seeded_shuffle(order, order_rng);
  // This rank's share of every optimizer step (everything, in a single process).
  const EpochShard shard = shard_epoch(order, config.train.images_per_step, world());
  std::vector<StreamJob> schedule;
  for (std::size_t image : shard.images) {
    schedule.push_back({image, 1});
    schedule.push_back({image, 2});
  }
  const int channels = static_cast<int>(model->spec().encoder.in_channels);
  TileStream stream({config.train.tile_batch, config.device.tiles_in_flight, static_cast<int>(config.device.threads)},
                    Preprocessing::from_config(config, channels, true));

  std::vector<int> labels;
  std::vector<std::vector<float>> probabilities;
  std::vector<double> losses;
  std::int64_t images_in_step = 0, images_done = 0, tiles = 0;
  const float loss_scale = 1.0f / static_cast<float>(config.train.images_per_step);
  const std::vector<net::Parameter*> params = image_model.parameters();
  const double lr = optimizer->learning_rate(0);
  const auto started = std::chrono::steady_clock::now();
  allocator_for(Device::cpu()).reset_peak();
  optimizer->zero_grad();
  auto report_progress = [&](bool final) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    const double rate = static_cast<double>(images_done) / std::max(elapsed, 1e-9);
    const double loss = losses.empty() ? 0.0 : std::accumulate(losses.begin(), losses.end(), 0.0) / losses.size();
    const auto total = static_cast<std::int64_t>(train.size());
    if (tty) {
      const int width = 24, filled = static_cast<int>(width * images_done / std::max<std::int64_t>(total, 1));
      std::fprintf(stderr, "\repoch %lld/%lld [%s%s] %lld/%lld  %.2f img/s  %.1f tiles/s  loss %.4f  ETA %s%s",
                   static_cast<long long>(epoch), static_cast<long long>(config.train.epochs),
                   std::string(static_cast<std::size_t>(filled), '#').c_str(),
                   std::string(static_cast<std::size_t>(width - filled), ' ').c_str(),
                   static_cast<long long>(images_done), static_cast<long long>(total), rate,
                   static_cast<double>(tiles) / std::max(elapsed, 1e-9), loss,
                   duration_text(static_cast<double>(total - images_done) / std::max(rate, 1e-9)).c_str(),
                   final ? "\n" : "");
      std::fflush(stderr);
    } else if (!final && images_done % config.output.log_every == 0) {
      spdlog::info("epoch {} {}/{} images, {:.2f} img/s, {:.1f} tiles/s, loss {:.4f}", epoch, images_done, total, rate,
                   static_cast<double>(tiles) / std::max(elapsed, 1e-9), loss);
    }
  };

  // Steps once this rank has its share of the current optimizer step: the ranks'
  // gradients are summed (one allreduce) before clipping, so every rank clips and
  // steps on the global gradient. A share may be 0 images; that step still runs.
  GradientAllreduce gradients(params);
  const double allreduce_seconds_before = world().stats().allreduce_seconds;
  std::size_t step_index = 0;
  auto take_ready_steps = [&] {
    while (step_index < shard.images_per_step.size() && images_in_step == shard.images_per_step[step_index]) {
      gradients.sum(world());
      if (config.train.clip_grad_norm > 0) {
        net::GradClipOptions clip;
        clip.max_norm = config.train.clip_grad_norm;
        clip.error_if_nonfinite = true;
        net::clip_grad_norm(backend, params, clip);
      }
      optimizer->step();
      optimizer->zero_grad();
      images_in_step = 0;
      ++step_index;
    }
  };
  take_ready_steps();  // steps in which this rank has no image (more ranks than images_per_step)
  const StreamStats stats = stream.run(
      schedule,
      [&](std::size_t image) {
        return plan_image(train[image].path, config.tiler, true, seed(kSubsample, e, image), seed(kAugment, e, image));
      },
      [&](const TileBatch& batch) {
        const Sample& sample = train[batch.image];
        if (batch.pass == 1) {
          if (batch.first_tile == 0)
            step->begin_image(static_cast<std::int64_t>(batch.plan->tiles.size()), sample.label,
                              seed(kDropout, e, batch.image));
          step->pass1_batch(kernels::upload_async(backend, batch.pixels).get(), batch.first_tile);
          if (batch.last_of_job) {
            const ImageOutcome outcome = step->finish_image(loss_scale);
            if (!std::isfinite(outcome.loss))
              throw Error(fmt::format("{} ({}): the loss is {} at epoch {}, optimizer step {}", sample.path,
                                      sample.origin, outcome.loss, epoch, optimizer->steps_taken()));
            labels.push_back(sample.label);
            probabilities.push_back(outcome.probabilities);
            losses.push_back(outcome.loss);
          }
          return;
        }
        step->pass2_batch(kernels::upload_async(backend, batch.pixels).get(), batch.first_tile);
        tiles += batch.pixels.dim(0);
        if (!batch.last_of_job) return;
        step->end_image();
        ++images_done;
        ++images_in_step;
        take_ready_steps();
        report_progress(false);
      });
  take_ready_steps();  // steps in which this rank had no image (the last, short one)
  BT_CHECK(step_index == shard.images_per_step.size(), "epoch {}: {} of {} optimizer steps taken", epoch, step_index,
           shard.images_per_step.size());
  gather_image_results(world(), shard.positions, train.size(), dataset.classes.size(), labels, probabilities, losses);
  tiles = sum_over_ranks(world(), tiles);
  average_buffers(world(), state_refs());
  if (world().distributed() && step_index > 0)
    spdlog::info("epoch {}: allreduce {:.1f} ms per optimizer step ({:.2f} MB of gradients each; {})", epoch,
                 1e3 * (world().stats().allreduce_seconds - allreduce_seconds_before) / static_cast<double>(step_index),
                 static_cast<double>(gradients.bytes()) / 1e6, world().description());
  report_progress(true);
  EpochSummary row;
  row.epoch = epoch;
  row.split = "train";
  row.metrics = compute_metrics(labels, probabilities, losses, dataset.classes.size());
  row.seconds = stats.seconds;
  row.tiles = tiles;
  row.wait_seconds = stats.wait_seconds;
  row.peak_allocated_bytes = allocator_for(Device::cpu()).stats().peak_bytes;
  row.peak_rss_bytes = peak_rss_bytes();
  row.learning_rate = lr;
  return row;
}

EpochSummary Trainer::State::evaluate(const std::vector<Sample>& split, const std::string& name, std::int64_t epoch) {
  std::vector<StreamJob> schedule;
  const std::vector<std::size_t> mine = shard_indices(split.size(), world());
  for (std::size_t i : mine) schedule.push_back({i, 0});
  const int channels = static_cast<int>(model->spec().encoder.in_channels);
  TileStream stream({config.train.tile_batch, config.device.tiles_in_flight, static_cast<int>(config.device.threads)},
                    Preprocessing::from_config(config, channels, false));
  std::vector<int> labels;
  std::vector<std::vector<float>> probabilities;
  std::vector<double> losses;
  std::int64_t tiles = 0;
  allocator_for(Device::cpu()).reset_peak();
  const StreamStats stats = stream.run(
      schedule, [&](std::size_t image) { return plan_image(split[image].path, config.tiler, false, 0, 0); },
      [&](const TileBatch& batch) {
        const Sample& sample = split[batch.image];
        if (batch.first_tile == 0)
          step->begin_image(static_cast<std::int64_t>(batch.plan->tiles.size()), sample.label, 0);
        step->eval_batch(kernels::upload_async(backend, batch.pixels).get(), batch.first_tile);
        tiles += batch.pixels.dim(0);
        if (!batch.last_of_job) return;
        const ImageOutcome outcome = step->finish_eval();
        labels.push_back(sample.label);
        probabilities.push_back(outcome.probabilities);
        losses.push_back(outcome.loss);
        step->end_image();
      });
  gather_image_results(world(), mine, split.size(), dataset.classes.size(), labels, probabilities, losses);
  tiles = sum_over_ranks(world(), tiles);
  EpochSummary row;
  row.epoch = epoch;
  row.split = name;
  row.metrics = compute_metrics(labels, probabilities, losses, dataset.classes.size());
  row.seconds = stats.seconds;
  row.tiles = tiles;
  row.wait_seconds = stats.wait_seconds;
  row.peak_allocated_bytes = allocator_for(Device::cpu()).stats().peak_bytes;
  row.peak_rss_bytes = peak_rss_bytes();
  row.learning_rate = optimizer->learning_rate(0);
  if (world().is_root())
    write_file_atomically((run_dir / fmt::format("confusion_{}.csv", name)).string(),
                          confusion_csv(row.metrics, dataset.classes));
  return row;
}

Trainer::Trainer(Config config, bool resume) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.config = std::move(config);
  s.resume = resume;
  s.run_dir = s.config.output.dir;
  s.tty = ::isatty(STDERR_FILENO) != 0;
  const Config& c = s.config;

  // cuda without a usable GPU is an error saying why; auto takes the GPU when there is one.
  s.backend = kernels::select_backend(c.device.type);
  spdlog::info("device: {}", kernels::describe_backend_choice(s.backend));

  fs::create_directories(s.run_dir);
  if (resume) {
    if (!fs::exists(s.run_dir / "checkpoints" / "last.safetensors"))
      throw Error(fmt::format("--resume {}: no checkpoints/last.safetensors to resume from", s.run_dir.string()));
  } else if (fs::exists(s.run_dir / "checkpoints" / "last.safetensors")) {
    throw Error(fmt::format("{} already holds a run; use --resume {} to continue it, or another output.dir",
                            s.run_dir.string(), s.run_dir.string()));
  }
  s.dataset = load_dataset(c.data, c.train.seed);
  for (const auto& skipped : s.dataset.skipped) spdlog::warn("skipped {}: {}", skipped.origin, skipped.reason);

  YAML::Node model_node = c.model.IsDefined() ? YAML::Clone(c.model) : YAML::Node(YAML::NodeType::Map);
  model_node["num_classes"] = static_cast<std::int64_t>(s.dataset.classes.size());
  net::ModelSpec spec = net::model_spec_from_yaml(model_node, c.source);
  s.model = std::make_unique<net::Model>(spec, s.seed(kInit));
  if (!spec.pretrained.empty() && !resume) {
    const net::LoadReport report = s.model->load_safetensors(spec.pretrained);
    for (const auto& note : report.notes) spdlog::info("pretrained weights: {}", note);
  }
  net::AggregatorSpec aggregator;
  aggregator.kind = net::parse_aggregator_kind(c.aggregator.kind);
  aggregator.hidden = c.aggregator.hidden;
  aggregator.gated = c.aggregator.gated;
  aggregator.dropout = static_cast<float>(c.aggregator.dropout);
  s.aggregator = net::make_aggregator(aggregator, s.model->encoder().feature_dim(), s.seed(kInit, 1));
  // Before the optimizer is made, so its state lives where the parameters do.
  s.model->to(backend_device(s.backend));
  s.aggregator->to(backend_device(s.backend));
  s.image_model = {&s.model->encoder(), s.aggregator.get(), &s.model->head()};
  if (!resume && c.train.bn_calibration_images > 0) {
    if (!c.train.freeze_bn)
      spdlog::warn("train.bn_calibration_images without train.freeze_bn: training BatchNorm replaces the "
                   "calibrated statistics with its own running averages");
    const BnCalibration calibration = calibrate_batch_norm(s.model->encoder(), s.backend, c, s.dataset.train,
                                                           c.train.bn_calibration_images, s.seed(kBnCalibration));
    spdlog::info("BatchNorm running statistics estimated from {} tiles of {} training images ({} batches, {:.1f} s)",
                 calibration.tiles, calibration.images, calibration.batches, calibration.seconds);
  }

  net::OptimizerConfig optimizer;
  optimizer.kind = c.train.optimizer;
  optimizer.lr = c.train.lr;
  optimizer.weight_decay = c.train.weight_decay;
  optimizer.momentum = c.train.momentum;
  // BatchNorm and bias parameters take no weight decay (the usual ResNet recipe).
  optimizer.decay_norm_and_bias = false;
  s.optimizer = net::make_optimizer(optimizer, s.image_model.parameters(), s.backend);
  net::LrScheduleConfig schedule;
  schedule.kind = net::parse_lr_schedule_kind(c.train.schedule);
  schedule.warmup_steps = c.train.warmup_steps;
  const std::int64_t total_steps = s.steps_per_epoch() * c.train.epochs;
  schedule.t_max = std::max<std::int64_t>(1, total_steps - c.train.warmup_steps);
  schedule.step_size = std::max<std::int64_t>(1, s.steps_per_epoch() * c.train.step_every_epochs);
  schedule.gamma = c.train.step_gamma;
  s.optimizer->set_schedule(net::LrSchedule(schedule));
  s.step = std::make_unique<TwoPassStep>(
      s.image_model, TwoPassOptions{.backend = s.backend,
                                    .freeze_bn = c.train.freeze_bn,
                                    .label_smoothing = static_cast<float>(c.train.label_smoothing)});

  if (resume) {
    const fs::path dir = s.run_dir / "checkpoints";
    const net::Metadata weights = load_model_checkpoint((dir / "last.safetensors").string(), *s.model, *s.aggregator);
    const net::Metadata training = load_training_state((dir / "last.training.safetensors").string(), *s.optimizer);
    s.epochs_done = std::stoll(training.at("epochs_done"));
    if (weights.at("epoch") != training.at("epochs_done"))
      throw Error(fmt::format("{}: the weights are of epoch {}, the optimizer state of epoch {}; the run was stopped "
                              "while checkpointing",
                              dir.string(), weights.at("epoch"), training.at("epochs_done")));
    if (!training.at("best_value").empty()) s.best_value = std::stod(training.at("best_value"));
    s.best_epoch = std::stoll(training.at("best_epoch"));
    s.epochs_without_improvement = std::stoll(training.at("epochs_without_improvement"));
    std::ifstream metrics(s.run_dir / "metrics.csv");
    // Rows of epochs after the checkpoint are dropped: a run killed while writing
    // its checkpoint had already written them, and those epochs run again.
    for (std::string line; std::getline(metrics, line);) {
      long long epoch = 0;
      const auto parsed = std::from_chars(line.data(), line.data() + line.size(), epoch);
      if (s.metrics_csv.empty() || parsed.ec != std::errc() || epoch <= s.epochs_done) s.metrics_csv += line + "\n";
    }
    spdlog::info("resuming {} after epoch {}", s.run_dir.string(), s.epochs_done);
  } else if (world().is_root()) {
    save_config(c, (s.run_dir / "config.yaml").string());
    write_file_atomically((s.run_dir / "classes.json").string(), nlohmann::json(s.dataset.classes).dump() + "\n");
  }
  // Identical starting weights on every rank, whatever each loaded or initialised.
  broadcast_state(world(), s.state_refs());
  if (world().distributed())
    spdlog::info("data-parallel: {}; each optimizer step's {} images are split across the ranks",
                 world().description(), c.train.images_per_step);
  spdlog::info("{} classes, {} training / {} validation / {} test images; encoder {} ({} features), aggregator {}",
               s.dataset.classes.size(), s.dataset.train.size(), s.dataset.val.size(), s.dataset.test.size(),
               spec.encoder.preset, s.model->encoder().feature_dim(), c.aggregator.kind);
}

Trainer::~Trainer() = default;

const Dataset& Trainer::dataset() const { return state_->dataset; }

TrainOutcome Trainer::run() {
  State& s = *state_;
  const Config& c = s.config;
  TrainOutcome outcome;
  const bool higher_is_better = c.train.best_metric != "val_loss";
  std::int64_t run_this_time = 0;
  while (s.epochs_done < c.train.epochs) {
    if (epoch_limit_ >= 0 && run_this_time >= epoch_limit_) break;
    const std::int64_t epoch = s.epochs_done + 1;
    EpochSummary train = s.train_epoch(epoch);
    s.append_metrics(train);
    outcome.rows.push_back(train);
    bool improved = false;
    std::string val_text;
    if (!s.dataset.val.empty()) {
      EpochSummary val = s.evaluate(s.dataset.val, "val", epoch);
      s.append_metrics(val);
      outcome.rows.push_back(val);
      const double value = metric_value(val.metrics, c.train.best_metric);
      improved = !s.best_value ||
                 (higher_is_better ? value > *s.best_value + c.train.early_stopping.min_delta
                                   : value < *s.best_value - c.train.early_stopping.min_delta);
      val_text = fmt::format(", val loss {:.4f} acc {:.3f} bal.acc {:.3f}", val.metrics.loss, val.metrics.accuracy,
                             val.metrics.balanced_accuracy);
      if (improved) {
        s.best_value = value;
        s.best_epoch = epoch;
        s.epochs_without_improvement = 0;
      } else {
        ++s.epochs_without_improvement;
      }
    }
    s.epochs_done = epoch;
    s.write_checkpoints(improved);
    ++run_this_time;
    spdlog::info("epoch {}/{}: train loss {:.4f} acc {:.3f}{} ({:.1f} s, {:.2f} img/s, compute waited {:.1f}%)", epoch,
                 c.train.epochs, train.metrics.loss, train.metrics.accuracy, val_text, train.seconds,
                 static_cast<double>(train.metrics.images) / std::max(train.seconds, 1e-9),
                 100.0 * train.wait_seconds / std::max(train.seconds, 1e-9));
    if (c.train.early_stopping.patience > 0 && s.epochs_without_improvement >= c.train.early_stopping.patience) {
      spdlog::info("early stopping: {} epochs without improvement of {}", s.epochs_without_improvement,
                   c.train.best_metric);
      outcome.stopped_early = true;
      break;
    }
  }
  write_weights_digest_if_asked(world(), s.state_refs());
  const bool finished = s.epochs_done >= c.train.epochs || outcome.stopped_early;
  if (finished && !s.dataset.test.empty()) {
    const fs::path best = s.run_dir / "checkpoints" / "best.safetensors";
    if (fs::exists(best)) load_model_checkpoint(best.string(), *s.model, *s.aggregator);
    EpochSummary test = s.evaluate(s.dataset.test, "test", s.epochs_done);
    s.append_metrics(test);
    outcome.rows.push_back(test);
    spdlog::info("test ({} checkpoint): loss {:.4f} accuracy {:.3f} balanced accuracy {:.3f}",
                 fs::exists(best) ? "best" : "last", test.metrics.loss, test.metrics.accuracy,
                 test.metrics.balanced_accuracy);
  }
  outcome.epochs_completed = s.epochs_done;
  outcome.best_value = s.best_value;
  outcome.best_epoch = s.best_epoch;
  return outcome;
}

}  // namespace bigtrain
