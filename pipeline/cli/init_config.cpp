#include "pipeline/cli/init_config.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <cstdint>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <opencv2/imgproc.hpp>

#include "kernels/core/error.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/dataset.hpp"
#include "pipeline/data/image_tiling.hpp"
#include "pipeline/plan/plan.hpp"
#include "pipeline/plan/plan_units.hpp"
#include "pipeline/common/random.hpp"
#include "tiler/background.hpp"
#include "tiler/image_source.hpp"
#include "tiler/tile_grid.hpp"

namespace fs = std::filesystem;

namespace bigtrain {
namespace {

constexpr std::size_t kDefaultBudget = std::size_t{2} << 30;
// A tile with less foreground than this is background when filtering is on.
constexpr double kMinForeground = 0.02;
// The demo's encoder for grey data on a CPU: what its digits needed to learn.
constexpr const char* kStem = "{kernel: 5, stride: 2, maxpool: false}";

struct OpenedImage {
  std::string path, label;
  std::shared_ptr<const tiler::ImageSource> source;
};

// Pixels of the sampled tiles, scaled to [0, 1] by each image's full scale.
struct PixelStats {
  std::vector<double> sum, sum_sq;
  double count = 0;
  double brightest_stored = 0;  // in stored units, before any scaling
};

std::string shorten(const std::vector<std::string>& items, std::size_t most = 4) {
  if (items.size() <= most) return fmt::format("{}", fmt::join(items, ", "));
  return fmt::format("{}, ... ({} in all)", fmt::join(items.begin(), items.begin() + most, ", "), items.size());
}

// Images spread over the classes (round robin in a seeded order), at most `count`.
std::vector<std::size_t> sample_images(const std::vector<OpenedImage>& images, int count, std::uint64_t seed) {
  std::map<std::string, std::vector<std::size_t>> by_class;
  for (std::size_t i = 0; i < images.size(); ++i) by_class[images[i].label].push_back(i);
  SplitMix64 rng(seed);
  for (auto& [label, indices] : by_class) seeded_shuffle(indices, rng);
  std::vector<std::size_t> picked;
  for (std::size_t round = 0; static_cast<int>(picked.size()) < count; ++round) {
    bool any = false;
    for (auto& [label, indices] : by_class)
      if (round < indices.size() && static_cast<int>(picked.size()) < count) {
        picked.push_back(indices[round]);
        any = true;
      }
    if (!any) break;
  }
  return picked;
}

void add_tile_stats(const cv::Mat& tile, double full_scale, PixelStats& stats) {
  const int channels = tile.channels();
  if (stats.sum.empty()) stats.sum.assign(channels, 0.0), stats.sum_sq.assign(channels, 0.0);
  cv::Mat scaled;
  tile.convertTo(scaled, CV_MAKETYPE(CV_64F, channels), 1.0 / full_scale);
  cv::Scalar mean, stddev;
  cv::meanStdDev(scaled, mean, stddev);
  const double n = static_cast<double>(tile.total());
  for (int c = 0; c < channels; ++c) {
    stats.sum[c] += mean[c] * n;
    stats.sum_sq[c] += (stddev[c] * stddev[c] + mean[c] * mean[c]) * n;
  }
  stats.count += n;
  double lo = 0, hi = 0;
  cv::minMaxLoc(tile.reshape(1), &lo, &hi);
  stats.brightest_stored = std::max(stats.brightest_stored, hi);
}

double round_to(double value, double step) { return std::round(value / step) * step; }

// Fractions of a grid's tiles kept by one background mode, per sampled image.
double kept_fraction(const tiler::Thumbnail& thumbnail, const tiler::ImageInfo& info, std::int64_t tile,
                     tiler::BackgroundMode mode, bool dark) {
  tiler::ForegroundOptions options;
  options.mode = mode;
  options.dark_foreground = dark;
  const tiler::ForegroundMask mask = tiler::foreground_mask(thumbnail, options);
  const tiler::Sampling sampling = tiler::sampling_at_level(info, 0);
  const tiler::TileGrid grid(sampling.width, sampling.height, static_cast<int>(tile), 0, tiler::BorderPolicy::pad);
  std::size_t kept = 0;
  for (const auto& t : grid.tiles()) kept += tiler::foreground_fraction(mask, sampling, t.rect) >= kMinForeground;
  return static_cast<double>(kept) / static_cast<double>(grid.tiles().size());
}

// Objects are on the side of the median where the grey levels spread furthest.
bool dark_objects(const cv::Mat& thumbnail) {
  cv::Mat grey;
  if (thumbnail.channels() == 3) cv::cvtColor(thumbnail, grey, cv::COLOR_RGB2GRAY);
  else grey = thumbnail;
  std::vector<double> counts(256, 0.0);
  for (int r = 0; r < grey.rows; ++r)
    for (int c = 0; c < grey.cols; ++c) ++counts[grey.ptr<std::uint8_t>(r)[c]];
  auto percentile = [&](double p) {
    double seen = 0;
    for (int v = 0; v < 256; ++v)
      if ((seen += counts[v]) >= p * static_cast<double>(grey.total())) return v;
    return 255;
  };
  const int low = percentile(0.005), median = percentile(0.5), high = percentile(0.995);
  return median - low >= high - median;
}

}  // namespace

InitResult init_config(const InitOptions& options) {
  InitResult result;
  auto& problems = result.problems;
  auto& decisions = result.decisions;
  const std::vector<ManifestEntry> entries = read_split(options.data);
  if (entries.empty()) {
    problems.push_back(fmt::format("{}: no images found (a CSV manifest `path,label` or one folder per class)",
                                   options.data));
    return result;
  }

  // Every header: a file that does not open is reported now, not in epoch 3.
  std::vector<OpenedImage> images;
  for (const ManifestEntry& entry : entries) {
    try {
      images.push_back({entry.path, entry.label, tiler::open_image(entry.path)});
    } catch (const std::exception& error) {
      problems.push_back(fmt::format("{} ({}): cannot be read: {}", entry.path, entry.origin, error.what()));
    }
  }
  std::map<std::string, std::vector<std::string>> by_class;
  for (const ManifestEntry& entry : entries) by_class[entry.label].push_back(entry.path);
  for (const auto& [label, paths] : by_class)
    if (paths.size() < 2)
      problems.push_back(fmt::format("class '{}' has {} image ({}): a class needs at least 2, one to learn from and "
                                     "one to validate on",
                                     label, paths.size(), paths.front()));
  if (by_class.size() < 2)
    problems.push_back(fmt::format("{}: only one class ('{}'); a classifier needs at least two", options.data,
                                   by_class.begin()->first));
  std::map<int, std::vector<std::string>> by_channels;
  for (const auto& image : images) by_channels[image.source->info().channels].push_back(image.path);
  if (by_channels.size() > 1) {
    const auto majority = std::max_element(by_channels.begin(), by_channels.end(), [](const auto& a, const auto& b) {
      return a.second.size() < b.second.size();
    });
    for (const auto& [channels, paths] : by_channels)
      if (channels != majority->first)
        for (const auto& path : paths)
          problems.push_back(fmt::format("{}: {} channel(s), but {} other images have {}: one model takes one channel "
                                         "count (convert these, or list them in a separate dataset)",
                                         path, channels, majority->second.size(), majority->first));
  }
  if (!problems.empty()) return result;

  // --- what the headers say ---
  const int channels = images.front().source->info().channels;
  std::int64_t min_side = INT64_MAX, max_width = 0, max_height = 0;
  std::set<int> bits;
  std::set<std::size_t> levels;
  bool every_max_tagged = true;
  std::set<int> tagged_max;
  for (const auto& image : images) {
    const tiler::ImageInfo& info = image.source->info();
    min_side = std::min({min_side, info.width(), info.height()});
    max_width = std::max(max_width, info.width());
    max_height = std::max(max_height, info.height());
    bits.insert(info.bits);
    levels.insert(info.levels.size());
    if (info.max_value > 0) tagged_max.insert(info.max_value);
    else every_max_tagged = false;
  }
  std::vector<std::string> class_counts;
  for (const auto& [label, paths] : by_class) class_counts.push_back(fmt::format("{}: {}", label, paths.size()));
  decisions.push_back(fmt::format("{} images in {} classes ({}); {} channel(s), {}-bit storage, {} to {} pixels a "
                                  "side, {} pyramid level(s)",
                                  images.size(), by_class.size(), shorten(class_counts, 8), channels,
                                  fmt::join(bits, "/"), min_side, std::max(max_width, max_height),
                                  fmt::join(levels, "/")));

  // --- full scale: the header's declared maximum, else the brightest sampled pixel ---
  const std::vector<std::size_t> sample = sample_images(images, options.sample_images, options.seed);
  PixelStats stats;
  SplitMix64 rng(mix_seed(options.seed, 0x1417ull));
  std::vector<std::pair<std::size_t, std::vector<cv::Mat>>> sampled_tiles;
  for (std::size_t index : sample) {
    const tiler::ImageInfo& info = images[index].source->info();
    const std::int64_t side = std::min<std::int64_t>({256, info.width(), info.height()});
    std::vector<cv::Mat> tiles;
    for (int k = 0; k < 12; ++k) {
      const auto x = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(info.width() - side + 1)));
      const auto y = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(info.height() - side + 1)));
      tiles.push_back(images[index].source->read_region(0, x, y, side, side));
      double lo = 0, hi = 0;
      cv::minMaxLoc(tiles.back().reshape(1), &lo, &hi);
      stats.brightest_stored = std::max(stats.brightest_stored, hi);
    }
    sampled_tiles.emplace_back(index, std::move(tiles));
  }
  std::int64_t max_value = 0;
  if (every_max_tagged) {
    decisions.push_back(fmt::format("full brightness: every header declares it (SMaxSampleValue/MaxSampleValue: {}), "
                                    "so data.max_value stays 0 (each image's own)",
                                    fmt::join(tagged_max, "/")));
  } else if (bits == std::set<int>{16}) {
    for (std::int64_t candidate : {1023, 4095, 16383, 65535})
      if (stats.brightest_stored <= static_cast<double>(candidate)) {
        max_value = candidate;
        break;
      }
    if (max_value == 65535) {
      max_value = 0;
      decisions.push_back(fmt::format("full brightness: 65535 (16-bit storage; brightest sampled pixel {:.0f} needs "
                                      "all 16 bits)",
                                      stats.brightest_stored));
    } else {
      decisions.push_back(fmt::format(
          "full brightness: data.max_value {} ({}-bit data in 16-bit samples: the brightest of {} sampled tiles is "
          "{:.0f}, and no header declares its maximum); at 65535 the network would see values up to {:.3f}",
          max_value, static_cast<int>(std::log2(static_cast<double>(max_value) + 1)), sample.size() * 12,
          stats.brightest_stored, static_cast<double>(max_value) / 65535.0));
    }
  } else {
    decisions.push_back(fmt::format("full brightness: the storage's maximum ({}-bit)", fmt::join(bits, "/")));
  }
  for (const auto& [index, tiles] : sampled_tiles) {
    const double full_scale = max_value > 0 ? static_cast<double>(max_value)
                                            : static_cast<double>(images[index].source->info().full_scale());
    for (const cv::Mat& tile : tiles) add_tile_stats(tile, full_scale, stats);
  }
  std::vector<double> mean, stddev;
  for (int c = 0; c < channels; ++c) {
    const double m = stats.sum[c] / stats.count;
    const double var = std::max(0.0, stats.sum_sq[c] / stats.count - m * m);
    mean.push_back(round_to(m, 0.001));
    stddev.push_back(std::max(0.01, round_to(std::sqrt(var), 0.001)));
  }
  decisions.push_back(fmt::format("normalisation: mean {} and std {} of {} sampled tiles' pixels (scaled to [0, 1]), "
                                  "so the network's input has mean 0 and std 1",
                                  mean, stddev, sample.size() * 12));

  // --- tile size: at least 4 tiles a side of the smallest image; then what fits ---
  const Backend backend = options.device == "cuda" ? Backend::cuda : Backend::cpu;
  const std::size_t budget = options.memory.value_or(kDefaultBudget);
  const std::vector<std::string> classes = [&] {
    std::vector<std::string> names;
    for (const auto& [label, paths] : by_class) names.push_back(label);
    return names;
  }();
  auto plan_for = [&](std::int64_t tile, std::int64_t tile_batch) {
    Config config = parse_config(fmt::format("data: {{train: x.csv}}\n"
                                             "model: {{preset: small, in_channels: {}, width: 0.5, stem: {}}}\n"
                                             "aggregator: {{kind: attention, hidden: 64}}\n"
                                             "train: {{tile_batch: {}, freeze_bn: true}}\n"
                                             "tiler: {{tile: {}}}\n",
                                             channels, kStem, tile_batch, tile),
                                 "<init plan>");
    config.data.classes = classes;
    PlanInputs inputs = plan_inputs_from_config(config, backend);
    inputs.image_width = max_width;
    inputs.image_height = max_height;
    return plan_training(inputs, budget);
  };
  std::int64_t tile = 0, tile_batch = 0;
  std::vector<std::int64_t> candidates;
  for (std::int64_t t : {256, 128, 64, 32})
    if (t * 4 <= min_side || t == 32) candidates.push_back(t);
  std::string tile_reason;
  for (std::int64_t t : candidates) {
    const TrainingPlan plan = plan_for(t, 1);
    const std::int64_t fits = plan.budget->max_tile_batch;
    if (fits >= 4 || (fits >= 1 && t == candidates.back())) {
      tile = t;
      tile_batch = std::min<std::int64_t>(16, fits);
      tile_reason = fmt::format("the largest of 256/128/64 with 4 tiles a side of the smallest image ({} px) and a "
                                "batch of 4 or more within {}; up to {} tiles of {} fit, {} used (a fixed small "
                                "batch: oneDNN builds its kernels once per batch shape)",
                                min_side, format_bytes(budget), fits, t, tile_batch);
      break;
    }
  }
  if (tile == 0) {
    problems.push_back(fmt::format("memory budget {} is too small for one tile of {} pixels of this model; give "
                                   "--memory more",
                                   format_bytes(budget), candidates.back()));
    return result;
  }
  const TrainingPlan plan = plan_for(tile, tile_batch);
  decisions.push_back(fmt::format("tiles: {} px, tile batch {}: {}", tile, tile_batch, tile_reason));
  decisions.push_back(fmt::format("plan ({}): peak {} of a training step on a {}x{} image ({} tiles), budget {}",
                                  options.device, format_bytes(plan.step.peak), max_width, max_height,
                                  plan.image ? plan.image->tiles : plan.tiles, format_bytes(budget)));

  // --- background: which filter keeps the objects and drops the rest ---
  double otsu = 0, local = 0, least_local = 1, least_otsu = 1;
  int dark_votes = 0;
  for (const auto& [index, tiles] : sampled_tiles) {
    const auto& source = *images[index].source;
    const tiler::Thumbnail thumbnail = tiler::make_thumbnail(source, 1024, static_cast<int>(max_value));
    const bool dark = dark_objects(thumbnail.pixels);
    dark_votes += dark ? 1 : -1;
    const double o = kept_fraction(thumbnail, source.info(), tile, tiler::BackgroundMode::otsu, dark);
    const double l = kept_fraction(thumbnail, source.info(), tile, tiler::BackgroundMode::local_contrast, dark);
    otsu += o / static_cast<double>(sampled_tiles.size());
    local += l / static_cast<double>(sampled_tiles.size());
    least_local = std::min(least_local, l);
    least_otsu = std::min(least_otsu, o);
  }
  const bool dark = dark_votes >= 0;
  std::string background = "none";
  double min_foreground = 0.0;
  const std::string measured =
      fmt::format("on {} sampled images Otsu keeps {:.0f}% of the tiles, local_contrast {:.0f}%", sampled_tiles.size(),
                  100 * otsu, 100 * local);
  if (least_local > 0 && local <= 0.6 && otsu > 1.5 * local) {
    background = "local_contrast";
    min_foreground = kMinForeground;
    decisions.push_back(fmt::format("background: local_contrast, {} objects: {}; Otsu's one cut keeps background "
                                    "(uneven or textured), the local one keeps what stands out of it",
                                    dark ? "dark" : "bright", measured));
  } else if (least_otsu > 0 && otsu <= 0.8) {
    background = "otsu";
    min_foreground = kMinForeground;
    decisions.push_back(fmt::format("background: otsu, {} objects: {}; one global cut separates them", dark ? "dark" : "bright",
                                    measured));
  } else {
    decisions.push_back(fmt::format("background: none (every tile kept): {}; no filter drops a clear background "
                                    "without dropping all of some image",
                                    measured));
  }

  // --- training: the demo's recipe ---
  const auto train_images = static_cast<std::int64_t>(std::llround(static_cast<double>(images.size()) * 0.8));
  // About 800 one-image steps (the demo's digits needed ~1500 before they separated;
  // objects that stand out of a filtered background need fewer), 5 to 30 epochs.
  const std::int64_t epochs = std::clamp<std::int64_t>((800 + train_images - 1) / std::max<std::int64_t>(1, train_images), 5, 30);
  const std::int64_t calibration = std::min<std::int64_t>(64, train_images);
  decisions.push_back(fmt::format("training: {} epochs (about 800 optimizer steps of one image each over {} training "
                                  "images, at most 30 epochs), frozen BatchNorm calibrated on {} images (one image's "
                                  "tiles fill each batch)",
                                  epochs, train_images, calibration));

  const fs::path out_dir = fs::absolute(fs::path(options.out)).parent_path();
  const std::string data_path = fs::absolute(options.data).lexically_normal().lexically_relative(out_dir).string();
  fs::path data_folder = fs::absolute(options.data).lexically_normal();
  if (data_folder.filename().empty()) data_folder = data_folder.parent_path();  // "my_images/"
  const std::string run_name = data_folder.stem().string();
  const std::string threshold_comment =
      background == "local_contrast" ? "least departure from the local background; -1: from the noise"
                                     : "fixed grey level with background: fixed; -1: none";
  result.yaml = fmt::format(
      R"(# Written by `bigtrain init {data_arg}` (docs/config.md lists every key).
# Runs as is: bigtrain run {out_name}
data:
  train: {data}   # relative to this file; 20% of each class is held out for validation
  mean: [{mean}]   # of the data's pixels scaled to [0, 1]
  std: [{std}]
  max_value: {max_value}   # full brightness; 0: each image's own (SMaxSampleValue/MaxSampleValue, else 2^bits-1)
tiler:
  tile: {tile}
  overlap: 0
  border: shift        # edge tiles moved inside the image: no padding seen as evidence
  background: {background}   # otsu | fixed | local_contrast | none (bigtrain tiles IMAGE --background ... --preview p.png)
  threshold: -1        # {threshold_comment}
  foreground: {foreground}
  min_foreground: {min_foreground}   # tiles with less foreground are dropped (0: all kept)
model:
  # The demo's encoder for grey images on a CPU: ~50k weights, a 5x5 stride-2 stem,
  # no max pooling (it halves what small tiles have).
  preset: small
  in_channels: {channels}
  width: 0.5
  stem: {stem}
aggregator:
  kind: attention      # learns which tiles hold the evidence
  hidden: 64
  gated: true
train:
  epochs: {epochs}
  images_per_step: 1   # weak image labels learn from many small steps
  tile_batch: {tile_batch}        # fits the {budget} budget (bigtrain plan {out_name} --memory {budget_arg})
  optimizer: adamw
  lr: 0.001
  weight_decay: 0.01
  schedule: cosine
  warmup_steps: 20
  # One image's tiles fill every batch, so batch statistics would normalise away that
  # image's evidence: BatchNorm is frozen, its statistics estimated from training images first.
  freeze_bn: true
  bn_calibration_images: {calibration}
  augmentation: {{flips: false, rot90: false}}   # turn on if the objects look the same mirrored
  seed: {seed}
  best_metric: val_loss   # separates epochs whose accuracy ties on a small validation set
device:
  type: {device}
  threads: 0
output:
  dir: runs/{run_name}
)",
      fmt::arg("data_arg", options.data), fmt::arg("out_name", fs::path(options.out).filename().string()),
      fmt::arg("data", data_path), fmt::arg("mean", fmt::join(mean, ", ")), fmt::arg("std", fmt::join(stddev, ", ")),
      fmt::arg("max_value", max_value), fmt::arg("tile", tile), fmt::arg("background", background),
      fmt::arg("threshold_comment", threshold_comment), fmt::arg("foreground", dark ? "dark" : "bright"),
      fmt::arg("min_foreground", min_foreground), fmt::arg("channels", channels), fmt::arg("stem", kStem),
      fmt::arg("epochs", epochs), fmt::arg("tile_batch", tile_batch), fmt::arg("budget", format_bytes(budget)),
      fmt::arg("budget_arg", fmt::format("{}", budget)), fmt::arg("calibration", calibration),
      fmt::arg("seed", options.seed), fmt::arg("device", options.device),
      fmt::arg("run_name", run_name.empty() ? "run" : run_name));
  return result;
}

}  // namespace bigtrain
