#include "pipeline/train/trainer.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kernels/backend.hpp"
#include "kernels/core/allocator.hpp"
#include "kernels/core/host_allocator.hpp"
#include "kernels/core/block_allocator.hpp"
#include "kernels/core/out_of_memory.hpp"
#include "kernels/core/error.hpp"
#include "kernels/device_select.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/upload.hpp"
#include "net/grad_clip.hpp"
#include "net/model.hpp"
#include "net/optimizer.hpp"
#include "pipeline/common/atomic_file.hpp"
#include "pipeline/common/random.hpp"
#include "pipeline/config/specs.hpp"
#include "pipeline/data/image_region_reader.hpp"
#include "pipeline/data/tile_stream.hpp"
#include "pipeline/distributed/distributed.hpp"
#include "pipeline/distributed/distributed_training.hpp"
#include "pipeline/engine/bn_calibration.hpp"
#include "pipeline/engine/checkpoint.hpp"
#include "pipeline/engine/checkpoint_metadata.hpp"
#include "pipeline/engine/feature_cache.hpp"
#include "pipeline/engine/gradient_check.hpp"
#include "pipeline/engine/loss_scaler.hpp"
#include "pipeline/engine/mixed_instances.hpp"
#include "pipeline/engine/stream_step.hpp"
#include "pipeline/engine/two_pass.hpp"
#include "pipeline/plan/plan.hpp"
#include "pipeline/plan/plan_units.hpp"
#include "pipeline/plan/recompute_split.hpp"
#include "pipeline/report/report.hpp"
#include "pipeline/train/interrupt.hpp"
#include "pipeline/train/contrastive.hpp"
#include "pipeline/train/pretext.hpp"
#include "pipeline/train/report_heatmaps.hpp"
#include "pipeline/train/teacher_tiles.hpp"
#include "pipeline/train/training_diagnostics.hpp"

namespace bigtrain {
namespace fs = std::filesystem;
namespace {

// Purposes mixed into the run seed, so each kind of draw has its own stream.
enum Stream : std::uint64_t {
  kOrder = 1, kSubsample = 2, kAugment = 3, kDropout = 4, kInit = 5, kBnCalibration = 6, kMixTiles = 7, kPretext = 8
};

std::int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

std::string format_optional(const std::optional<double>& value) {
  return value ? fmt::format("{:.6f}", *value) : std::string();
}

double metric_value(const ClassificationMetrics& m, BestMetric metric) {
  switch (metric) {
    case BestMetric::val_accuracy: return m.accuracy;
    case BestMetric::val_balanced_accuracy: return m.balanced_accuracy;
    case BestMetric::val_loss: return m.loss;
    case BestMetric::val_auc: return m.auc.value_or(0.5);
  }
  throw Error(fmt::format("unknown best_metric {}", static_cast<int>(metric)));
}

// Thrown at an optimizer-step boundary (or between evaluated images) when a stop was
// asked for; not an Error, so the tile stream passes it through unchanged.
struct StopAtStepBoundary {};

std::string signal_text(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  return fmt::format("signal {}", signal);
}

// metrics.csv's last columns: the device allocator's peak in use and peak reserved
// (what the card must have), filled on CUDA runs only.
constexpr std::string_view kDeviceMetricsColumns = "device_peak_bytes,device_peak_reserved_bytes";

// `bigtrain plan`'s step peak for this config, which an out-of-memory error quotes
// (0, "unknown", when the config needs more than the plan can know, such as the
// image size of tiler.mode stream).
std::size_t planned_step_bytes(const Config& config, Backend backend) {
  try {
    return plan_training(plan_inputs_from_config(config, backend)).step.peak;
  } catch (const std::exception& error) {
    spdlog::debug("no plan figure for out-of-memory errors: {}", error.what());
    return 0;
  }
}

// train.memory_budget: how many tile batches of an image pass 1 keeps so that pass 2
// need not recompute them (none where the plan cannot be made).
RecomputeSplit planned_recompute_split(const Config& config, Backend backend) {
  RecomputeSplit split;
  try {
    std::string source;
    std::size_t budget = resolve_memory_budget(config, backend, &source);
    // auto on the CPU: ranks started on one machine would each take half of it.
    if (!config.train.memory_budget_bytes && backend == Backend::cpu && world().distributed()) {
      budget /= static_cast<std::size_t>(world().size());
      source += fmt::format(", shared by {} ranks", world().size());
    }
    split = recompute_split(plan_training(plan_inputs_from_config(config, backend)), budget);
    split.budget_source = source;
  } catch (const std::exception& error) {
    spdlog::debug("no recompute split (pass 2 recomputes every tile batch): {}", error.what());
    return {};
  }
  if (config.train.mix_tiles) {
    split.kept_batches = 0;
    split.nothing_kept_because = "train.mix_tiles deals tiles of several images into each batch";
  }
  // Whether the cheapest tail fits one image of one batch.
  const net::EncoderPlan::Tail* shortest = shortest_kept_tail(split);
  const std::size_t room = split.budget - std::min(split.budget, split.recompute_peak);
  if (!split.nothing_kept_because.empty())
    spdlog::debug("{}: pass 2 recomputes every tile: {}", split.budget_source, split.nothing_kept_because);
  else if (split.kept_batches == 0 && (shortest == nullptr || shortest->kept_bytes > room))
    spdlog::info("{}: {}; pass 2 recomputes every tile batch (a step recomputing all peaks at {}, a kept batch "
                 "would add {})",
                 split.budget_source, format_bytes(split.budget), format_bytes(split.recompute_peak),
                 format_bytes(split.kept_per_batch));
  else
    spdlog::info("{}: {}; per image, pass 1 keeps what spares pass 2 the most: up to {} whole tile batch(es) ({} "
                 "each), or the encoder's last layers of every batch (from {} on: {} a batch, the shortest tail); "
                 "pass 2 recomputes the rest",
                 split.budget_source, format_bytes(split.budget), split.kept_batches,
                 format_bytes(split.kept_per_batch), shortest == nullptr ? "-" : shortest->first,
                 format_bytes(shortest == nullptr ? 0 : shortest->kept_bytes));
  return split;
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
  RecomputeSplit recompute;  // train.memory_budget: the tile batches pass 1 keeps per image
  // The budget bounds what the host allocator holds, its cache included, while the
  // run lasts (on a GPU the host keeps only tiles in flight: no bound there).
  std::optional<ScopedHostReserveLimit> host_reserve_limit;
  std::unique_ptr<StreamStep> stream_step;  // tiler.mode stream, in place of `step`'s passes
  std::unique_ptr<MixedInstanceStep> mixed_step;  // train.mix_tiles, in place of `step` in training
  std::unique_ptr<TrainingDiagnostics> diagnostics;  // train.diagnostics, rank 0 only
  // train.teacher: each training image's tiles, in grid pixels of its tiling; empty: all.
  std::vector<std::vector<cv::Rect>> teacher_tiles;
  // A frozen encoder's features of the training and validation images, kept from
  // their first epoch while its inputs stay the same (feature_cache.hpp); null: off.
  std::unique_ptr<FeatureCache> train_features, val_features;
  bool logged_kept_features = false;
  bool encoder_frozen() const {
    return config.train.encoder_lr_scale == 0.0 &&
           (config.train.freeze_bn || model->spec().encoder.norm == net::NormKind::group);
  }
  ImageModel image_model;
  Backend backend = Backend::cpu;
  LossScaler loss_scaler;  // enabled for train.precision fp16
  std::int64_t epochs_done = 0;
  std::optional<double> best_value;
  std::int64_t best_epoch = 0;
  std::int64_t epochs_without_improvement = 0;
  std::string metrics_csv;  // whole file, rewritten each epoch
  std::string metrics_header() const;
  // Peaks per metrics row: the host allocator's, and the device's on a GPU.
  void reset_memory_peaks() {
    allocator_for(Device::cpu()).reset_peak();
    if (backend == Backend::cuda) allocator_for(backend_device(backend)).reset_peak();
  }
  void record_memory_peaks(EpochSummary& row) const {
    row.peak_allocated_bytes = allocator_for(Device::cpu()).stats().peak_bytes;
    row.peak_rss_bytes = peak_rss_bytes();
    if (backend != Backend::cuda) return;
    const BlockAllocator& device = device_block_allocator(backend_device(backend));
    row.device_peak_bytes = device.stats().peak_bytes;
    row.device_peak_reserved_bytes = device.peak_reserved_bytes();
  }
  bool tty = false;

  // Epoch epochs_done + 1 when it stopped (or resumed) between two optimizer steps:
  // the training results its metrics row needs beyond the weights and optimizer.
  struct PartialEpoch {
    bool active = false;
    std::int64_t steps = 0;  // of this epoch, taken
    std::vector<int> labels;
    std::vector<std::vector<float>> probabilities;
    std::vector<double> losses;
    std::int64_t tiles = 0;
    double seconds = 0.0, wait_seconds = 0.0;
    double learning_rate = 0.0;  // at the epoch's start

    nlohmann::json to_json() const;
    static PartialEpoch from_json(const std::string& text, const std::string& source);
  } partial;
  bool checkpoint_current = false;  // the checkpoint on disk is this state
  std::int64_t stop_after_steps = -1;

  bool stop_requested() const {
    return stop_signal() != 0 || (stop_after_steps >= 0 && optimizer->steps_taken() >= stop_after_steps);
  }
  std::string position_text() const;
  void check_gradients(const Sample& sample, std::int64_t epoch) const {
    check_gradients(fmt::format("{} ({})", sample.path, sample.origin), epoch);
  }
  // `source`: what the gradients came from (an image, or a mixed step's images).
  void check_gradients(const std::string& source, std::int64_t epoch) const;

  std::uint64_t seed(std::uint64_t purpose, std::uint64_t epoch = 0, std::uint64_t image = 0) const {
    return mix_seed(config.train.seed, purpose, epoch, image);
  }
  // train.bn_calibration_images: the running statistics re-estimated from training
  // tiles as the training forward reads them, with the encoder's current weights.
  void calibrate_batch_norm_if_asked() {
    if (config.train.bn_calibration_images <= 0 || model->spec().encoder.norm == net::NormKind::group) return;
    const BnCalibration calibration = calibrate_batch_norm(model->encoder(), backend, config, dataset.train,
                                                           config.train.bn_calibration_images, seed(kBnCalibration));
    spdlog::info("BatchNorm running statistics estimated from {} tiles of {} training images ({} batches, {:.1f} s)",
                 calibration.tiles, calibration.images, calibration.batches, calibration.seconds);
  }
  std::int64_t steps_per_epoch() const {
    const auto n = static_cast<std::int64_t>(dataset.train.size());
    return (n + config.train.images_per_step - 1) / config.train.images_per_step;
  }
  std::vector<net::StateRefs> state_refs() const { return {model->state(), aggregator->state()}; }
  net::Metadata checkpoint_metadata() const;
  void write_checkpoints(bool best);
  // checkpoints/pretrained.safetensors: the encoder as pretraining (and calibration)
  // left it, before any labelled step, so later runs can start from it with
  // model.pretrained and pretrain.epochs: 0 instead of paying for the pretext again.
  void write_pretrained_checkpoint();
  EpochSummary train_epoch(std::int64_t epoch);
  bool streaming() const { return stream_step != nullptr; }
  ImageRegionReader region_reader(const Sample& sample) const {
    const int channels = static_cast<int>(model->spec().encoder.in_channels);
    return ImageRegionReader(sample.path, config.tiler, Preprocessing::from_config(config, channels, false),
                             config.data.max_value);
  }
  EpochSummary evaluate(const std::vector<Sample>& split, const std::string& name, std::int64_t epoch);
  void append_metrics(const EpochSummary& row);
};

nlohmann::json Trainer::State::PartialEpoch::to_json() const {
  // nlohmann writes doubles with enough digits to read back the same bits (and a
  // float widened to double is exact), so a resumed epoch's metrics are unchanged.
  return {{"steps", steps},   {"labels", labels},     {"probabilities", probabilities}, {"losses", losses},
          {"tiles", tiles},   {"seconds", seconds},   {"wait_seconds", wait_seconds},   {"learning_rate", learning_rate}};
}

Trainer::State::PartialEpoch Trainer::State::PartialEpoch::from_json(const std::string& text, const std::string& source) {
  try {
    const nlohmann::json json = nlohmann::json::parse(text);
    PartialEpoch p;
    p.active = true;
    p.steps = json.at("steps").get<std::int64_t>();
    p.labels = json.at("labels").get<std::vector<int>>();
    p.probabilities = json.at("probabilities").get<std::vector<std::vector<float>>>();
    p.losses = json.at("losses").get<std::vector<double>>();
    p.tiles = json.at("tiles").get<std::int64_t>();
    p.seconds = json.at("seconds").get<double>();
    p.wait_seconds = json.at("wait_seconds").get<double>();
    p.learning_rate = json.at("learning_rate").get<double>();
    BT_CHECK(p.labels.size() == p.probabilities.size() && p.labels.size() == p.losses.size(),
             "{}: the unfinished epoch lists {} labels, {} probabilities, {} losses", source, p.labels.size(),
             p.probabilities.size(), p.losses.size());
    return p;
  } catch (const nlohmann::json::exception& error) {
    throw Error(fmt::format("{}: the unfinished epoch's state is unreadable: {}", source, error.what()));
  }
}

std::string Trainer::State::position_text() const {
  if (partial.active)
    return fmt::format("epoch {}, optimizer step {} of {} (step {} of the run)", epochs_done + 1, partial.steps,
                       steps_per_epoch(), optimizer->steps_taken());
  return fmt::format("end of epoch {} (optimizer step {} of the run)", epochs_done, optimizer->steps_taken());
}

// Called after each image's backward pass: the gradients accumulated so far were
// finite before it, so the first non-finite one is this image's. With fp16 loss
// scaling an overflow is expected now and then (the scale probes upwards): the
// step is checked as a whole and skipped instead (take_ready_steps).
void Trainer::State::check_gradients(const std::string& source, std::int64_t epoch) const {
  if (loss_scaler.enabled()) return;
  const std::vector<std::string> offending = non_finite_gradients(backend, image_model.parameters());
  if (offending.empty()) return;
  const std::size_t shown = std::min<std::size_t>(offending.size(), 5);
  throw Error(fmt::format("{}: its backward pass made the gradients non-finite (NaN or Inf) at epoch {}, "
                          "optimizer step {} of the run, in {}{}; the weights were not updated with them. Lower "
                          "train.lr, set train.clip_grad_norm, or check the image and data.mean/std",
                          source, epoch, optimizer->steps_taken() + 1,
                          fmt::join(offending.begin(), offending.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
                          offending.size() > shown ? fmt::format(" and {} more", offending.size() - shown) : ""));
}

net::Metadata Trainer::State::checkpoint_metadata() const {
  CheckpointMetadata metadata = checkpoint_metadata_of_run(config, model->spec(), dataset.classes);
  metadata.epoch = epochs_done;
  metadata.training_state = position_text();
  return to_safetensors_metadata(metadata);
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
  training["bigtrain.checkpoint"] = metadata.at("bigtrain.checkpoint");
  if (partial.active) training["unfinished_epoch"] = partial.to_json().dump();
  if (loss_scaler.enabled()) training["loss_scaler"] = loss_scaler.to_json();
  // The order is what makes a kill at any moment safe. best first: a kill after it
  // re-runs this epoch from the previous state, which makes the same best again.
  // Then the training state, the commit point: it alone is what resume reads (it
  // carries the weights). last.safetensors, for people and `bigtrain infer`, last;
  // resume rewrites it when a kill came between the two.
  if (best) save_model_checkpoint((dir / "best.safetensors").string(), *model, *aggregator, metadata);
  save_training_state((dir / "last.training.safetensors").string(), *model, *aggregator, *optimizer, training);
  save_model_checkpoint((dir / "last.safetensors").string(), *model, *aggregator, metadata);
  checkpoint_current = true;
  world().barrier();
}

void Trainer::State::write_pretrained_checkpoint() {
  if (!world().is_root()) return;
  const fs::path dir = run_dir / "checkpoints";
  fs::create_directories(dir);
  const fs::path path = dir / "pretrained.safetensors";
  save_model_checkpoint(path.string(), *model, *aggregator, checkpoint_metadata());
  spdlog::info("pretrained encoder saved: {} (start another run from it with model.pretrained and pretrain.epochs: 0)",
               path.string());
}

// The device columns come last, so readers that count columns from the left
// (tests/cli/lib/same_run.sh, scripts/measure_train_rss) keep theirs.
std::string Trainer::State::metrics_header() const {
  std::string header = "epoch,split,loss,accuracy,balanced_accuracy,auc,images,tiles,seconds,images_per_s,tiles_per_s,"
                       "wait_fraction,peak_allocated_bytes,peak_rss_bytes,lr";
  for (const auto& name : dataset.classes) header += ",recall_" + name;
  return header + "," + std::string(kDeviceMetricsColumns);
}

void Trainer::State::append_metrics(const EpochSummary& row) {
  if (!world().is_root()) return;  // rows hold every rank's images (gathered)
  const auto& m = row.metrics;
  if (metrics_csv.empty()) metrics_csv = metrics_header() + "\n";
  const double seconds = std::max(row.seconds, 1e-9);
  metrics_csv += fmt::format("{},{},{:.6f},{:.6f},{:.6f},{},{},{},{:.3f},{:.3f},{:.3f},{:.4f},{},{},{:.8g}", row.epoch,
                             row.split, m.loss, m.accuracy, m.balanced_accuracy, format_optional(m.auc), m.images,
                             row.tiles, row.seconds, static_cast<double>(m.images) / seconds,
                             static_cast<double>(row.tiles) / seconds, row.wait_seconds / seconds,
                             row.peak_allocated_bytes, row.peak_rss_bytes, row.learning_rate);
  for (double recall : m.recall) metrics_csv += std::isnan(recall) ? std::string(",") : fmt::format(",{:.6f}", recall);
  // Empty on the CPU: no device allocator to ask (peak_allocated_bytes is the host's).
  metrics_csv += backend == Backend::cuda
                     ? fmt::format(",{},{}", row.device_peak_bytes, row.device_peak_reserved_bytes)
                     : std::string(",,");
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
  // An epoch resumed between optimizer steps skips the images of the steps it took.
  std::size_t first_step = 0, images_skipped = 0;
  if (partial.active) {
    BT_CHECK(!world().distributed(), "{}: the checkpoint stopped inside epoch {}; resume it without mpirun",
             run_dir.string(), epoch);
    first_step = static_cast<std::size_t>(partial.steps);
    BT_CHECK(first_step <= shard.images_per_step.size(), "checkpoint: {} optimizer steps taken of an epoch of {}",
             first_step, shard.images_per_step.size());
    for (std::size_t k = 0; k < first_step; ++k) images_skipped += static_cast<std::size_t>(shard.images_per_step[k]);
  }
  const bool single_pass = step->single_pass();
  // A frozen encoder (rate 0, statistics frozen or GroupNorm) would take nothing from
  // pass 2 but gradients its optimizer multiplies by 0: pass 1's features and the
  // aggregator's backward are the whole step, at a third of the cost.
  const bool no_pass2 = single_pass || encoder_frozen();
  // The same H every epoch: frozen weights, and inputs that do not change (no
  // augmentation, every tile read). Mixed batches and the stream have no H to keep.
  if (!train_features && encoder_frozen() && !single_pass && !mixed_step && !streaming() &&
      !config.train.augmentation.any() && config.tiler.max_tiles_per_image == 0 && config.train.feature_cache_mb > 0)
    train_features = std::make_unique<FeatureCache>("training images", train.size(), config.train.feature_cache_mb << 20);
  const bool from_kept_features = train_features && train_features->complete();
  std::vector<StreamJob> schedule;
  for (std::size_t i = images_skipped; i < shard.images.size() && !streaming() && !from_kept_features; ++i) {
    schedule.push_back({shard.images[i], 1});
    // Pass 2 last batch first, skipping the batches pass 1 kept (two_pass.hpp).
    if (!no_pass2)
      schedule.push_back({.image = shard.images[i],
                          .pass = 2,
                          .reverse_batches = mixed_step == nullptr,
                          .skip_batches_of = [this](std::int64_t tiles) {
                            return image_keep(recompute, tiles, config.train.tile_batch).kept_batches;
                          }});
  }
  const int channels = static_cast<int>(model->spec().encoder.in_channels);
  TileStream stream({config.train.tile_batch, config.device.tiles_in_flight, static_cast<int>(config.device.threads)},
                    Preprocessing::from_config(config, channels, true));

  std::vector<int> labels;
  std::vector<std::vector<float>> probabilities;
  std::vector<double> losses;
  std::int64_t images_in_step = 0, images_done = 0, tiles = 0;
  const float mean_over_step = 1.0f / static_cast<float>(config.train.images_per_step);
  const std::vector<net::Parameter*> params = image_model.parameters();
  double lr = optimizer->learning_rate(0);
  double seconds_before = 0.0, wait_seconds_before = 0.0;
  if (partial.active) {
    labels = partial.labels;
    probabilities = partial.probabilities;
    losses = partial.losses;
    tiles = partial.tiles;
    lr = partial.learning_rate;
    seconds_before = partial.seconds;
    wait_seconds_before = partial.wait_seconds;
    images_done = static_cast<std::int64_t>(images_skipped);
  }
  const auto started = std::chrono::steady_clock::now();
  reset_memory_peaks();
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
  std::size_t step_index = first_step;
  const bool step_every_batch = mixed_step && config.train.step_every_batch;
  // The schedule counts groups of images_per_step images; with step_every_batch
  // each group takes many updates at its group's rate.
  auto set_schedule_clock = [&] {
    if (step_every_batch)
      optimizer->set_schedule_clock((epoch - 1) * steps_per_epoch() + static_cast<std::int64_t>(step_index));
  };
  // One update from the gradients accumulated since the last: summed over the ranks
  // (one allreduce) before clipping, so every rank clips and steps on the global
  // gradient.
  auto update_weights = [&] {
    gradients.sum(world());
    // fp16: the summed gradients are the same on every rank, so all skip alike.
    const float scale_used = loss_scaler.scale();
    const bool overflow = loss_scaler.enabled() && !non_finite_gradients(backend, params).empty();
    if (!loss_scaler.update(overflow)) {
      spdlog::warn("fp16 loss scaling: non-finite gradients at epoch {}, optimizer step {} of {} (step {} of the "
                   "run): step skipped, loss scale {} -> {}",
                   epoch, step_index + 1, shard.images_per_step.size(), optimizer->steps_taken() + 1, scale_used,
                   loss_scaler.scale());
    } else {
      // Unscaled before clipping, so train.clip_grad_norm means the true norm.
      if (scale_used != 1.0f)
        for (net::Parameter* p : params)
          if (p->grad.defined()) kernels::scale(backend, 1.0f / scale_used, p->grad);
      if (diagnostics) diagnostics->step(epoch, optimizer->steps_taken() + 1);
      if (config.train.clip_grad_norm > 0) {
        net::GradClipOptions clip;
        clip.max_norm = config.train.clip_grad_norm;
        clip.error_if_nonfinite = true;
        net::clip_grad_norm(backend, params, clip);
      }
      optimizer->step();
    }
    optimizer->zero_grad();
  };
  auto take_ready_steps = [&] {
    while (step_index < shard.images_per_step.size() && images_in_step == shard.images_per_step[step_index]) {
      if (!step_every_batch) update_weights();  // otherwise the group's batches took theirs
      checkpoint_current = false;
      images_in_step = 0;
      ++step_index;
      set_schedule_clock();
      // Ctrl-C / SIGTERM: the step is whole, nothing of the next image is computed.
      if (stop_requested()) throw StopAtStepBoundary{};
    }
  };
  // What a checkpoint written now needs to finish this epoch later.
  auto keep_partial = [&](double wait_seconds) {
    partial.active = true;
    partial.steps = static_cast<std::int64_t>(step_index);
    partial.labels = labels;
    partial.probabilities = probabilities;
    partial.losses = losses;
    partial.tiles = tiles;
    partial.seconds = seconds_before + std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    partial.wait_seconds = wait_seconds_before + wait_seconds;
    partial.learning_rate = lr;
  };
  auto record_outcome = [&](const Sample& sample, const ImageOutcome& outcome) {
    if (!std::isfinite(outcome.loss))
      throw Error(fmt::format("{} ({}): the loss is {} at epoch {}, optimizer step {} of the run; the "
                              "weights were not updated with it. Lower train.lr, set train.clip_grad_norm, "
                              "or check the image and data.mean/std",
                              sample.path, sample.origin, outcome.loss, epoch, optimizer->steps_taken() + 1));
    labels.push_back(sample.label);
    probabilities.push_back(outcome.probabilities);
    losses.push_back(outcome.loss);
  };
  // train.mix_tiles: the step's images are all in; their tiles train together.
  auto train_mixed_step = [&] {
    MemoryPhase phase("training (mixed tile batches)");
    std::vector<MixedImageResult> results =
        step_every_batch
            ? mixed_step->train(loss_scaler.scale(), seed(kMixTiles, e, step_index),
                                [&] {
                                  check_gradients(fmt::format("a mixed tile batch of optimizer step {}", step_index + 1),
                                                  epoch);
                                  update_weights();
                                })
            : mixed_step->train(mean_over_step * loss_scaler.scale(), seed(kMixTiles, e, step_index));
    std::string sources;
    for (const MixedImageResult& r : results) {
      const Sample& sample = train[r.image];
      record_outcome(sample, r.vote.outcome);
      if (diagnostics)
        diagnostics->image(epoch, optimizer->steps_taken() + 1, *r.plan, sample.label, r.vote.outcome.loss,
                           r.tile_weights, {});
      sources += (sources.empty() ? "" : ", ") + sample.path;
    }
    check_gradients(fmt::format("the mixed tile batches of {}", sources), epoch);
    images_done += static_cast<std::int64_t>(results.size());
    images_in_step += static_cast<std::int64_t>(results.size());
    report_progress(false);
    take_ready_steps();
  };
  // The image's gradients are all in: release it and step when the step is whole.
  auto training_image_done = [&](const Sample& sample) {
    step->end_image();
    check_gradients(sample, epoch);
    ++images_done;
    ++images_in_step;
    report_progress(false);
    take_ready_steps();
  };
  // H is whole (pass 1's batches, or kept features): the head, the loss, and the
  // encoder's backward unless pass 2 has tiles to recompute.
  auto end_of_pass1 = [&](const Sample& sample, const ImageTiling& plan) {
    const ImageOutcome outcome = step->finish_image(mean_over_step * loss_scaler.scale());
    record_outcome(sample, outcome);
    if (diagnostics)
      diagnostics->image(epoch, optimizer->steps_taken() + 1, plan, sample.label, outcome.loss, step->attention(),
                         step->selected_tiles());
    if (no_pass2) {
      training_image_done(sample);
    } else if (step->recomputed_tiles() == 0) {  // every batch kept: pass 2 reads nothing
      step->backward_kept();
      training_image_done(sample);
    }
  };
  StreamStats stats;
  std::int64_t tiles_encoded = 0;
  set_schedule_clock();
  try {
  take_ready_steps();  // steps in which this rank has no image (more ranks than images_per_step)
  // tiler.mode stream: one image at a time, read region by region by the trunk itself.
  for (std::size_t i = images_skipped; i < shard.images.size() && streaming(); ++i) {
    MemoryPhase phase("streamed training step");
    const std::size_t image = shard.images[i];
    const Sample& sample = train[image];
    ImageRegionReader reader = region_reader(sample);
    const ImageOutcome outcome = stream_step->train_image(reader, sample.label, seed(kDropout, e, image),
                                                          mean_over_step * loss_scaler.scale());
    record_outcome(sample, outcome);
    tiles += outcome.tiles;
    check_gradients(sample, epoch);
    ++images_done;
    ++images_in_step;
    report_progress(false);
    take_ready_steps();
  }
  for (std::size_t i = images_skipped; i < shard.images.size() && from_kept_features; ++i) {
    MemoryPhase phase("training from kept features");
    const std::size_t image = shard.images[i];
    const FeatureCache::Entry& kept = train_features->at(image);
    step->begin_image(kept.features.dim(0), train[image].label, seed(kDropout, e, image), 0);
    step->load_features(kept.features);
    tiles += kept.features.dim(0);
    end_of_pass1(train[image], *kept.plan);
  }
  if (!schedule.empty()) stats = stream.run(
      schedule,
      [&](std::size_t image) {
        ImageTiling tiling = image_tiling(train[image].path, config.tiler, true, seed(kSubsample, e, image),
                                          seed(kAugment, e, image), config.data.max_value);
        if (!teacher_tiles.empty()) tiling.tiles = teacher_tiles[image];
        return tiling;
      },
      [&](const TileBatch& batch) {
        const Sample& sample = train[batch.image];
        MemoryPhase phase(batch.pass == 1 ? (single_pass ? "training (one pass)" : "pass 1") : "pass 2");
        auto image_done = [&] { training_image_done(sample); };
        if (mixed_step) {
          mixed_step->add(batch.image, sample.label, static_cast<std::int64_t>(batch.plan->tiles.size()), batch.plan,
                          batch.pixels, batch.first_tile);
          tiles += batch.pixels.dim(0);
          if (batch.last_of_job && static_cast<std::int64_t>(mixed_step->images()) ==
                                       shard.images_per_step[step_index] - images_in_step)
            train_mixed_step();
          return;
        }
        if (batch.pass == 1) {
          if (batch.first_tile == 0) {
            const auto image_tiles = static_cast<std::int64_t>(batch.plan->tiles.size());
            const ImageKeep keep = no_pass2 ? ImageKeep{} : image_keep(recompute, image_tiles, config.train.tile_batch);
            step->begin_image(image_tiles, sample.label, seed(kDropout, e, batch.image),
                              kept_tiles(keep, config.train.tile_batch, image_tiles), keep.tail_children);
          }
          if (single_pass) {
            step->train_instances_batch(kernels::upload_async(backend, batch.pixels).get(), batch.first_tile,
                                        mean_over_step * loss_scaler.scale());
            tiles += batch.pixels.dim(0);
          } else {
            step->pass1_batch(kernels::upload_async(backend, batch.pixels).get(), batch.first_tile);
            tiles += batch.pixels.dim(0);  // counted once, here: pass 2 skips the kept batches
          }
          if (batch.last_of_job) {
            if (train_features) train_features->store(batch.image, step->features(), batch.plan);
            end_of_pass1(sample, *batch.plan);
          }
          return;
        }
        step->pass2_batch(kernels::upload_async(backend, batch.pixels).get(), batch.first_tile);
        if (batch.last_of_job) {
          step->backward_kept();
          image_done();
        }
      });
  take_ready_steps();  // steps in which this rank had no image (the last, short one)
  } catch (const StopAtStepBoundary&) {
    if (tty) std::fputc('\n', stderr);
    keep_partial(0.0);
    throw;
  }
  BT_CHECK(step_index == shard.images_per_step.size(), "epoch {}: {} of {} optimizer steps taken", epoch, step_index,
           shard.images_per_step.size());
  // Kept until the epoch's checkpoint: a stop during validation saves them.
  keep_partial(stats.wait_seconds);
  gather_image_results(world(), shard.positions, train.size(), dataset.classes.size(), labels, probabilities, losses);
  tiles = sum_over_ranks(world(), tiles);
  tiles_encoded = from_kept_features ? 0 : tiles;
  average_buffers(world(), state_refs());
  if (world().distributed() && step_index > 0)
    spdlog::info("epoch {}: allreduce {:.1f} ms per optimizer step ({:.2f} MB of gradients each; {})", epoch,
                 1e3 * (world().stats().allreduce_seconds - allreduce_seconds_before) / static_cast<double>(step_index),
                 static_cast<double>(gradients.bytes()) / 1e6, world().description());
  report_progress(true);
  if (diagnostics) diagnostics->end_epoch(epoch);
  EpochSummary row;
  row.epoch = epoch;
  row.split = "train";
  row.metrics = compute_metrics(labels, probabilities, losses, dataset.classes.size());
  row.seconds = partial.seconds;
  row.tiles = tiles;
  row.tiles_encoded = tiles_encoded;
  if (from_kept_features && !logged_kept_features) {
    logged_kept_features = true;
    spdlog::info("epoch {} trained from the frozen encoder's kept features ({} images, {:.1f} MiB; "
                 "train.feature_cache_mb): no tile read or encoded", epoch, train_features->images(),
                 static_cast<double>(train_features->bytes()) / (1 << 20));
  }
  row.wait_seconds = partial.wait_seconds;
  record_memory_peaks(row);
  row.learning_rate = lr;
  return row;
}

EpochSummary Trainer::State::evaluate(const std::vector<Sample>& split, const std::string& name, std::int64_t epoch) {
  std::vector<StreamJob> schedule;
  const std::vector<std::size_t> mine = shard_indices(split.size(), world());
  // Validation runs every epoch: a frozen encoder's features of it are kept too
  // (evaluation never augments).
  FeatureCache* kept = nullptr;
  if (name == "val" && encoder_frozen() && !streaming() && config.train.feature_cache_mb > 0) {
    if (!val_features)
      val_features = std::make_unique<FeatureCache>("validation images", split.size(), config.train.feature_cache_mb << 20,
                                                    mine.size());
    kept = val_features.get();
  }
  const bool from_kept_features = kept && kept->complete();
  if (!from_kept_features)
    for (std::size_t i : mine) schedule.push_back({i, 0});
  const int channels = static_cast<int>(model->spec().encoder.in_channels);
  TileStream stream({config.train.tile_batch, config.device.tiles_in_flight, static_cast<int>(config.device.threads)},
                    Preprocessing::from_config(config, channels, false));
  std::vector<int> labels;
  std::vector<std::vector<float>> probabilities;
  std::vector<double> losses;
  std::int64_t tiles = 0;
  reset_memory_peaks();
  MemoryPhase phase("eval");
  const auto started = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < mine.size() && streaming(); ++i) {
    const Sample& sample = split[mine[i]];
    ImageRegionReader reader = region_reader(sample);
    const ImageOutcome outcome = stream_step->eval_image(reader, sample.label);
    stream_step->end_image();
    labels.push_back(sample.label);
    probabilities.push_back(outcome.probabilities);
    losses.push_back(outcome.loss);
    tiles += outcome.tiles;
    if (!world().distributed() && stop_requested()) throw StopAtStepBoundary{};
  }
  for (std::size_t i = 0; i < mine.size() && from_kept_features; ++i) {
    const Sample& sample = split[mine[i]];
    const Tensor& features = kept->at(mine[i]).features;
    step->begin_image(features.dim(0), sample.label, 0);
    step->load_features(features);
    const ImageOutcome outcome = step->finish_eval();
    labels.push_back(sample.label);
    probabilities.push_back(outcome.probabilities);
    losses.push_back(outcome.loss);
    tiles += features.dim(0);
    step->end_image();
    if (!world().distributed() && stop_requested()) throw StopAtStepBoundary{};
  }
  if (streaming()) schedule.clear();
  StreamStats stats;
  if (!schedule.empty()) stats = stream.run(
      schedule, [&](std::size_t image) { return image_tiling(split[image].path, config.tiler, false, 0, 0, config.data.max_value); },
      [&](const TileBatch& batch) {
        const Sample& sample = split[batch.image];
        if (batch.first_tile == 0)
          step->begin_image(static_cast<std::int64_t>(batch.plan->tiles.size()), sample.label, 0);
        step->eval_batch(kernels::upload_async(backend, batch.pixels).get(), batch.first_tile);
        tiles += batch.pixels.dim(0);
        if (!batch.last_of_job) return;
        if (kept) kept->store(batch.image, step->features(), batch.plan);
        const ImageOutcome outcome = step->finish_eval();
        labels.push_back(sample.label);
        probabilities.push_back(outcome.probabilities);
        losses.push_back(outcome.loss);
        step->end_image();
        // Evaluation changes no state: a stop drops it, and resume evaluates again.
        if (!world().distributed() && stop_requested()) throw StopAtStepBoundary{};
      });
  gather_image_results(world(), mine, split.size(), dataset.classes.size(), labels, probabilities, losses);
  tiles = sum_over_ranks(world(), tiles);
  EpochSummary row;
  row.epoch = epoch;
  row.split = name;
  row.metrics = compute_metrics(labels, probabilities, losses, dataset.classes.size());
  // The tile stream times itself; the stream mode and kept features do not use it.
  row.seconds = streaming() || from_kept_features
                    ? std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count()
                    : stats.seconds;
  row.tiles = tiles;
  row.tiles_encoded = from_kept_features ? 0 : tiles;
  row.wait_seconds = stats.wait_seconds;
  record_memory_peaks(row);
  row.learning_rate = optimizer->learning_rate(0);
  if (world().is_root())
    write_file_atomically((run_dir / fmt::format("confusion_{}.csv", name)).string(),
                          confusion_csv(row.metrics, dataset.classes));
  return row;
}

Trainer::Trainer(Config config, bool resume, std::optional<Backend> backend) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.config = std::move(config);
  s.resume = resume;
  s.run_dir = s.config.output.dir;
  s.tty = ::isatty(STDERR_FILENO) != 0;
  const Config& c = s.config;

  // device.index picks the GPU of a single process; the ranks of a distributed run
  // have theirs from their node-local rank (pipeline/distributed/distributed.cpp).
  if (!world().distributed()) set_cuda_backend_device(static_cast<int>(c.device.index));
  // cuda without a usable GPU is an error saying why; auto takes the GPU when there is one.
  s.backend = backend ? *backend : kernels::select_backend(c.device.type);
  spdlog::info("device: {}", kernels::describe_backend_choice(s.backend));
  if (s.backend == Backend::cuda) {
    // Before the first op: convolutions choose their algorithms when created.
    kernels::apply_cuda_limits(c.device.memory_limit_bytes, c.train.cudnn_workspace_bytes);
    if (c.device.memory_limit_bytes != 0)
      spdlog::info("device.memory_limit: at most {} reserved on {}", c.device.memory_limit,
                   backend_device(s.backend).str());
    set_planned_device_bytes(planned_step_bytes(c, s.backend));
  } else if (c.device.memory_limit_bytes != 0) {
    spdlog::warn("device.memory_limit {} caps GPU memory; this run is on the {}, where it has no effect",
                 c.device.memory_limit, backend_name(s.backend));
  }
  const DType compute_dtype = c.train.precision;
  // Before building anything, every op this run calls: the CPU's bf16 depends on its
  // instruction set.
  if (const std::string why = why_backend_cannot_train(c, s.backend, kernels::describe_backend_choice(s.backend));
      !why.empty())
    throw Error(why);
  LossScalerOptions scaling;
  scaling.enabled = compute_dtype == DType::f16;
  scaling.init_scale = c.train.loss_scale.init;
  scaling.growth_interval = c.train.loss_scale.growth_interval;
  s.loss_scaler = LossScaler(scaling);
  spdlog::info("precision: {}{}", choice_name(c.train.precision),
               compute_dtype == DType::f32 ? " (float32 throughout)"
               : scaling.enabled
                   ? fmt::format(" (encoder convolutions in float16, float32 master weights; dynamic loss scale from "
                                 "{}, growth every {} finite steps)",
                                 scaling.init_scale, scaling.growth_interval)
                   : std::string(" (encoder convolutions in bfloat16, float32 master weights)"));

  fs::create_directories(s.run_dir);
  const fs::path last_weights = s.run_dir / "checkpoints" / "last.safetensors";
  const fs::path last_training = s.run_dir / "checkpoints" / "last.training.safetensors";
  if (resume) {
    if (!fs::exists(last_training))
      throw Error(fmt::format("--resume {}: no checkpoints/last.training.safetensors to resume from",
                              s.run_dir.string()));
  } else if (fs::exists(last_weights) || fs::exists(last_training)) {
    throw Error(fmt::format("{} already holds a run; use --resume {} to continue it, or another output.dir",
                            s.run_dir.string(), s.run_dir.string()));
  }
  s.dataset = load_dataset(c.data, c.train.seed, ImageCheck::header);
  if (!s.dataset.skipped.empty()) {
    // Also in report.html's data summary (report_data.cpp reads dataset.skipped).
    spdlog::warn("data.on_bad_image: skip: {} image(s) left out of this run:", s.dataset.skipped.size());
    for (const auto& skipped : s.dataset.skipped) spdlog::warn("skipped {}: {}", skipped.origin, skipped.reason);
  }

  YAML::Node model_node = c.model.IsDefined() ? YAML::Clone(c.model) : YAML::Node(YAML::NodeType::Map);
  model_node["num_classes"] = static_cast<std::int64_t>(s.dataset.classes.size());
  net::ModelSpec spec = net::model_spec_from_yaml(model_node, c.source);
  s.model = std::make_unique<net::Model>(spec, s.seed(kInit));
  s.aggregator = net::make_aggregator(aggregator_spec(c.aggregator), s.model->encoder().feature_dim(), s.seed(kInit, 1));
  if (!spec.pretrained.empty() && !resume) {
    for (const auto& note : load_pretrained_weights(spec.pretrained, *s.model, *s.aggregator))
      spdlog::info("pretrained weights: {}", note);
  }
  // Before the optimizer is made, so its state lives where the parameters do.
  s.model->to(backend_device(s.backend));
  s.aggregator->to(backend_device(s.backend));
  s.image_model = {&s.model->encoder(), s.aggregator.get(), &s.model->head()};
  // Not a warning: the demo learns only frozen (its per-image batches normalise the
  // evidence away), while a deeper fresh encoder frozen never leaves chance; which one
  // a data set needs is measured, not known (docs/learning.md).
  const bool group_norm = spec.encoder.norm == net::NormKind::group;
  if (group_norm && (c.train.freeze_bn || c.train.bn_calibration_images > 0))
    spdlog::warn("train.freeze_bn and train.bn_calibration_images do nothing with model.norm: group (GroupNorm "
                 "has no running statistics)");
  if (!resume && c.train.freeze_bn && spec.pretrained.empty() && c.pretrain.epochs == 0 && !group_norm)
    spdlog::info("train.freeze_bn with a randomly initialised encoder: BatchNorm keeps the statistics of the "
                 "initial weights; if the loss stays at ln(classes), try batch statistics (docs/learning.md)");
  if (!resume && c.train.bn_calibration_images > 0 && !group_norm && !c.train.freeze_bn)
    spdlog::warn("train.bn_calibration_images without train.freeze_bn: training BatchNorm replaces the "
                 "calibrated statistics with its own running averages");
  // With pretraining, after it (Trainer::run): its statistics are those of the pretext's views.
  if (!resume && c.pretrain.epochs == 0) s.calibrate_batch_norm_if_asked();

  net::OptimizerConfig optimizer;
  optimizer.kind = c.train.optimizer;
  optimizer.lr = c.train.lr;
  optimizer.weight_decay = c.train.weight_decay;
  optimizer.momentum = c.train.momentum;
  // BatchNorm and bias parameters take no weight decay (the usual ResNet recipe).
  optimizer.decay_norm_and_bias = false;
  if (c.train.encoder_lr_scale == 1.0) {
    s.optimizer = net::make_optimizer(optimizer, s.image_model.parameters(), s.backend);
  } else {
    // The encoder's groups at the scaled rate; the aggregator's and head's at lr.
    std::vector<net::Parameter*> encoder_params = s.model->encoder().parameters(), rest;
    const std::set<net::Parameter*> in_encoder(encoder_params.begin(), encoder_params.end());
    for (net::Parameter* p : s.image_model.parameters())
      if (!in_encoder.contains(p)) rest.push_back(p);
    std::vector<net::ParamGroup> groups;
    for (net::ParamGroup& g : net::split_decay_groups(encoder_params)) {
      g.lr = c.train.lr * c.train.encoder_lr_scale;
      groups.push_back(std::move(g));
    }
    for (net::ParamGroup& g : net::split_decay_groups(rest)) groups.push_back(std::move(g));
    s.optimizer = net::make_optimizer(optimizer, std::move(groups), s.backend);
  }
  net::LrScheduleConfig schedule;
  schedule.kind = c.train.schedule;
  schedule.warmup_steps = c.train.warmup_steps;
  const std::int64_t total_steps = s.steps_per_epoch() * c.train.epochs;
  schedule.t_max = std::max<std::int64_t>(1, total_steps - c.train.warmup_steps);
  schedule.step_size = std::max<std::int64_t>(1, s.steps_per_epoch() * c.train.step_every_epochs);
  schedule.gamma = c.train.step_gamma;
  s.optimizer->set_schedule(net::LrSchedule(schedule));
  if (c.train.diagnostics && world().is_root()) {
    std::vector<net::Parameter*> weights;  // convolution and linear weights: a norm per layer
    for (net::Parameter* p : s.image_model.parameters())
      if (p->value.rank() >= 2) weights.push_back(p);
    s.diagnostics = std::make_unique<TrainingDiagnostics>(s.run_dir.string(), c.data.train, weights, s.backend);
  }
  s.step = std::make_unique<TwoPassStep>(
      s.image_model, TwoPassOptions{.backend = s.backend,
                                    .freeze_bn = c.train.freeze_bn,
                                    .label_smoothing = static_cast<float>(c.train.label_smoothing),
                                    .encoder_compute_dtype = compute_dtype,
                                    .top_tiles = c.aggregator.top_tiles,
                                    .instance_k = c.train.instance_loss.k,
                                    .instance_weight = static_cast<float>(c.train.instance_loss.weight)});
  s.recompute = planned_recompute_split(c, s.backend);
  if (s.backend == Backend::cpu && s.recompute.budget > 0) s.host_reserve_limit.emplace(s.recompute.budget);
  if (c.train.step_every_batch && world().distributed())
    throw Error(fmt::format("{}: train.step_every_batch steps after every tile batch, and the ranks of {} would deal "
                            "different numbers of batches; train with one process, or without step_every_batch",
                            c.source, world().description()));
  if (c.train.mix_tiles)
    s.mixed_step = std::make_unique<MixedInstanceStep>(
        s.image_model, MixedInstanceOptions{.backend = s.backend,
                                            .freeze_bn = c.train.freeze_bn,
                                            .label_smoothing = static_cast<float>(c.train.label_smoothing),
                                            .encoder_compute_dtype = compute_dtype,
                                            .tile_batch = c.train.tile_batch,
                                            .top_k = c.train.instance_top_k,
                                            .train_encoder = c.train.encoder_lr_scale > 0.0});
  if (c.tiler.mode == TilerMode::stream) {
    try {
      s.stream_step = std::make_unique<StreamStep>(
          s.image_model, StreamStepOptions{.backend = s.backend,
                                           .tile = c.tiler.tile,
                                           .freeze_bn = c.train.freeze_bn,
                                           .label_smoothing = static_cast<float>(c.train.label_smoothing),
                                           .encoder_compute_dtype = compute_dtype});
    } catch (const Error& error) {
      throw Error(fmt::format("{}: {}", c.source, error.what()));
    }
  }

  if (resume) {
    const LoadedTrainingState loaded =
        load_training_state(last_training.string(), *s.optimizer, *s.model, *s.aggregator);
    const net::Metadata& training = loaded.metadata;
    s.epochs_done = std::stoll(training.at("epochs_done"));
    if (const auto found = training.find("unfinished_epoch"); found != training.end())
      s.partial = State::PartialEpoch::from_json(found->second, last_training.string());
    // The scale reached, not the initial one: restarting from init would skip steps
    // the uninterrupted run took. A run switched to fp16 on resume starts at init.
    if (const auto found = training.find("loss_scaler"); found != training.end() && s.loss_scaler.enabled())
      s.loss_scaler.restore(found->second, last_training.string());
    if (!loaded.loaded_weights) {
      // A training state of an older bigtrain, without the weights: they come from
      // last.safetensors, and the pair must be of one step.
      const net::Metadata weights = load_model_checkpoint(last_weights.string(), *s.model, *s.aggregator);
      if (weights.at("epoch") != training.at("epochs_done"))
        throw Error(fmt::format("{}: the weights are of epoch {}, the optimizer state ({}) of epoch {}; they were not "
                                "written together, so the run cannot resume exactly",
                                last_weights.string(), weights.at("epoch"), last_training.string(),
                                training.at("epochs_done")));
    } else {
      // A kill between the two writes of a checkpoint leaves last.safetensors one
      // checkpoint behind (or missing); resume never reads it, but people do.
      std::string weights_checkpoint = "nothing readable";
      try {
        weights_checkpoint = read_checkpoint_metadata(last_weights.string()).at("bigtrain.checkpoint");
      } catch (const std::exception&) {
      }
      if (weights_checkpoint != training.at("bigtrain.checkpoint") && world().is_root()) {
        spdlog::warn("{} holds {}, the training state {} (the run was stopped between writing the two); rewriting it "
                     "from the training state",
                     last_weights.string(), weights_checkpoint, training.at("bigtrain.checkpoint"));
        save_model_checkpoint(last_weights.string(), *s.model, *s.aggregator, s.checkpoint_metadata());
      }
    }
    s.checkpoint_current = true;
    if (!training.at("best_value").empty()) s.best_value = std::stod(training.at("best_value"));
    s.best_epoch = std::stoll(training.at("best_epoch"));
    s.epochs_without_improvement = std::stoll(training.at("epochs_without_improvement"));
    std::ifstream metrics(s.run_dir / "metrics.csv");
    // Rows of epochs after the checkpoint are dropped: a run killed while writing
    // its checkpoint had already written them, and those epochs run again.
    const std::string header = s.metrics_header();
    bool upgrade = false;  // a file from before the device columns: each row gains them, empty
    for (std::string line; std::getline(metrics, line);) {
      if (s.metrics_csv.empty() && line != header &&
          line + "," + std::string(kDeviceMetricsColumns) == header) {
        upgrade = true;
        line = header;
      } else if (upgrade && !line.empty()) {
        line += ",,";
      }
      long long epoch = 0;
      const auto parsed = std::from_chars(line.data(), line.data() + line.size(), epoch);
      if (s.metrics_csv.empty() || parsed.ec != std::errc() || epoch <= s.epochs_done) s.metrics_csv += line + "\n";
    }
    if (s.partial.active)
      spdlog::info("resuming {} in epoch {} after optimizer step {} of {}", s.run_dir.string(), s.epochs_done + 1,
                   s.partial.steps, s.steps_per_epoch());
    else
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
               spec.encoder.preset, s.model->encoder().feature_dim(), choice_name(c.aggregator.kind));
}

Trainer::~Trainer() = default;

const Dataset& Trainer::dataset() const { return state_->dataset; }

void Trainer::stop_after_optimizer_steps(std::int64_t steps) { state_->stop_after_steps = steps; }

TrainOutcome Trainer::run() {
  State& s = *state_;
  const Config& c = s.config;
  TrainOutcome outcome;
  const bool higher_is_better = c.train.best_metric != BestMetric::val_loss;
  std::int64_t run_this_time = 0;
  try {
  // Before the first epoch of a new run; a resumed run has its pretrained weights.
  if (c.pretrain.epochs > 0 && !s.resume && s.epochs_done == 0 && !s.partial.active) {
    BT_CHECK(!world().distributed(), "{}: pretrain runs in one process; train without mpirun, or set pretrain.epochs: 0",
             c.source);
    const auto stop = [&] { return s.stop_requested(); };
    const auto history =
        c.pretrain.method == PretextMethod::contrastive
            ? pretrain_by_contrast(c, s.dataset.train, s.model->encoder(), s.backend, s.seed(kPretext), stop)
            : pretrain_by_rotation(c, s.dataset.train, s.model->encoder(), s.backend, s.seed(kPretext), stop);
    write_file_atomically((s.run_dir / "pretext.csv").string(), pretext_csv(history));
    s.calibrate_batch_norm_if_asked();
    s.write_pretrained_checkpoint();
  }
  // After pretraining, which learns from every tile. A resumed run scores again: the
  // teacher's choice is a pure function of its checkpoint and the images.
  if (!c.train.teacher.checkpoint.empty() && s.teacher_tiles.empty() && s.epochs_done < c.train.epochs)
    s.teacher_tiles = select_tiles_by_teacher(c, s.dataset.train, s.dataset.classes, s.backend);
  while (s.epochs_done < c.train.epochs) {
    if (epoch_limit_ >= 0 && run_this_time >= epoch_limit_) break;
    // A stop that came while the last checkpoint was written: it is this state.
    if (s.stop_requested()) throw StopAtStepBoundary{};
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
    s.partial = {};
    s.write_checkpoints(improved);
    if (improved) refresh_report_heatmaps(c, s.dataset, epoch, s.backend);  // report.html's heatmaps of the best checkpoint (issue 10)
    ++run_this_time;
    spdlog::info("epoch {}/{}: train loss {:.4f} acc {:.3f}{} ({:.1f} s, {:.2f} img/s, compute waited {:.1f}%)", epoch,
                 c.train.epochs, train.metrics.loss, train.metrics.accuracy, val_text, train.seconds,
                 static_cast<double>(train.metrics.images) / std::max(train.seconds, 1e-9),
                 100.0 * train.wait_seconds / std::max(train.seconds, 1e-9));
    if (c.train.early_stopping.patience > 0 && s.epochs_without_improvement >= c.train.early_stopping.patience) {
      spdlog::info("early stopping: {} epochs without improvement of {}", s.epochs_without_improvement,
                   choice_name(c.train.best_metric));
      outcome.stopped_early = true;
      break;
    }
  }
  write_weights_digest_if_asked(world(), s.state_refs());
  const bool finished = s.epochs_done >= c.train.epochs || outcome.stopped_early;
  if (finished && !s.dataset.test.empty() && s.stop_requested()) throw StopAtStepBoundary{};
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
  } catch (const StopAtStepBoundary&) {
    if (!s.checkpoint_current) s.write_checkpoints(false);
    outcome.interrupted = true;
    outcome.stop_signal = stop_signal();
    outcome.stopped_at = s.position_text();
    spdlog::warn("{}: stopped at {}; checkpoint written to {}",
                 outcome.stop_signal ? signal_text(outcome.stop_signal) : std::string("stop requested"),
                 outcome.stopped_at, (s.run_dir / "checkpoints").string());
  }
  outcome.epochs_completed = s.epochs_done;
  outcome.best_value = s.best_value;
  outcome.best_epoch = s.best_epoch;
  return outcome;
}

}  // namespace bigtrain
