#pragma once
// The configuration of one run, read from one YAML file plus `--set a.b=value`
// overrides, validated strictly (see config_reader.hpp); closed choices are parsed
// once into enums (choices.hpp). Every field has the default
// written here; the resolved config (defaults filled in) is saved in the run
// directory so a run can always be repeated from its own folder.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "pipeline/config/choices.hpp"

namespace bigtrain {

struct DataConfig {
  // A CSV manifest `path,label` or a folder with one sub-folder per class; relative
  // paths are relative to the config file.
  std::string train;
  std::string val;   // empty: split off `train` (stratified, seeded by train.seed)
  std::string test;  // optional
  double val_fraction = 0.2;
  // Class names in output order; empty: the sorted distinct labels of the training set.
  std::vector<std::string> classes;
  // Per-channel normalisation after scaling pixels to [0, 1]; one value broadcasts.
  std::vector<double> mean = {0.5};
  std::vector<double> std = {0.25};
  // dataset: (x - mean) / std with the values above. tile: each tile to mean 0 and
  // standard deviation 1 per channel, so an illumination gradient across the image
  // (the seeds' scans) no longer decides what the first layers see.
  Normalization normalize = Normalization::dataset;
  // normalize: highpass: the Gaussian's sigma in pixels at the read resolution.
  double highpass_sigma = 3.0;
  // The pixel value that is full brightness (1.0 before normalisation) for every
  // image; 0: each image's own (SMaxSampleValue/MaxSampleValue, else 255 or 65535).
  std::int64_t max_value = 0;
  OnBadImage on_bad_image = OnBadImage::error;  // error | skip
};

struct TilerConfig {
  // tiles | resize (the whole image resized to resize_size, the baseline) | stream (the
  // whole image through the encoder's trunk, `tile` pixels at a time with the halo its
  // receptive field needs, exactly the untiled network; docs/streaming.md)
  TilerMode mode = TilerMode::tiles;
  std::int64_t tile = 256;
  std::int64_t overlap = 0;
  tiler::BorderPolicy border = tiler::BorderPolicy::pad;  // pad | drop | shift: the last row/column of tiles at the image edge
  std::int64_t level = 0;      // pyramid level read
  double downsample = 1.0;     // extra downsampling of the read level
  double min_foreground = 0.0; // tiles with a smaller foreground fraction are dropped (0: keep all)
  Foreground foreground = Foreground::dark;  // dark (tissue on a bright slide) | bright (objects on black)
  // otsu | fixed | local_contrast | none: how the thumbnail's foreground is found
  // (tiler/background.hpp); used when min_foreground > 0.
  tiler::BackgroundMode background = tiler::BackgroundMode::otsu;
  // fixed: the grey level (0..255 on the thumbnail) between background and
  // foreground; local_contrast: the least departure from the local background, in
  // grey levels; -1: Otsu's cut / chosen from the noise.
  std::int64_t threshold = -1;
  std::int64_t max_tiles_per_image = 0;  // training only: random subset of this many tiles (0: all)
  std::int64_t resize_size = 224;        // mode resize only
  // mode resize only: resized images kept in memory, up to this many MiB (0: read
  // and resize every image every epoch; see pipeline/data/resize_cache.hpp).
  std::int64_t resize_cache_mb = 1024;
  friend bool operator==(const TilerConfig&, const TilerConfig&) = default;
};

struct AggregatorConfig {
  net::AggregatorKind kind = net::AggregatorKind::attention;  // mean | max | attention | instance
  std::int64_t hidden = 128;       // attention only
  bool gated = true;               // attention only: Ilse et al.'s gated variant
  double dropout = 0.0;            // on the aggregated feature, training only
  // attention only: 0 aggregates every tile; M > 0 only the M tiles the attention
  // ranks highest (scored without gradients; pass 2 computes only those; see two_pass.hpp).
  std::int64_t top_tiles = 0;
};

struct AugmentationConfig {
  bool flips = false;
  bool rot90 = false;
  double brightness = 0.0;  // additive jitter, uniform in [-b, b] (pixels in [0, 1])
  double contrast = 0.0;    // multiplicative jitter around the tile mean, uniform in [1-c, 1+c]
  double noise = 0.0;       // standard deviation of additive Gaussian noise
  // One random similarity transform per tile about its centre (reflected borders):
  // a digit-like object seen once per image otherwise reaches the encoder at the same
  // few positions every epoch, and a small set is memorised by where its strokes lie.
  double rotate = 0.0;  // degrees, uniform in [-r, r]
  double scale = 0.0;   // factor uniform in [1-s, 1+s]
  double shift = 0.0;   // translation, uniform in [-t, t] of the tile's side, each axis
  bool affine() const { return rotate > 0 || scale > 0 || shift > 0; }
  bool any() const { return flips || rot90 || brightness > 0 || contrast > 0 || noise > 0 || affine(); }
};

// aggregator.kind attention: CLAM's instance loss with the image head as the
// instance classifier (pipeline/engine/two_pass.hpp, TwoPassOptions::instance_k).
struct InstanceLossConfig {
  std::int64_t k = 0;    // most and least attended tiles per image; 0: off
  double weight = 0.3;   // of the instance loss beside the image's (CLAM: 0.3)
};

// train.teacher: an earlier run's checkpoint picks the tiles each training image is
// trained on (pipeline/train/teacher_tiles.hpp); evaluation sees every tile.
struct TeacherConfig {
  std::string checkpoint;  // absolute once parsed; empty: off
  std::int64_t top = 3;    // the teacher's highest-scoring tiles per image
};

struct EarlyStoppingConfig {
  std::int64_t patience = 0;  // epochs without improvement of best_metric; 0: off
  double min_delta = 0.0;
};

// Dynamic loss scaling of train.precision fp16, torch.cuda.amp.GradScaler's
// defaults: the loss gradient is multiplied by the scale; a step whose gradients
// overflow is skipped and the scale halved; after growth_interval steps without
// overflow the scale doubles.
struct LossScaleConfig {
  double init = 65536.0;
  std::int64_t growth_interval = 2000;
};

struct TrainConfig {
  std::int64_t epochs = 10;
  std::int64_t images_per_step = 1;
  std::int64_t tile_batch = 16;
  net::OptimizerKind optimizer = net::OptimizerKind::adamw;  // sgd | adamw
  double lr = 1e-3;
  double momentum = 0.9;  // sgd only
  double weight_decay = 1e-4;
  net::LrScheduleKind schedule = net::LrScheduleKind::cosine;  // constant | cosine | step
  std::int64_t warmup_steps = 0;
  double step_gamma = 0.1;            // schedule step only
  std::int64_t step_every_epochs = 10;  // schedule step only
  double clip_grad_norm = 0.0;  // 0: off
  double label_smoothing = 0.0;
  AugmentationConfig augmentation;
  std::uint64_t seed = 0;
  EarlyStoppingConfig early_stopping;
  InstanceLossConfig instance_loss;
  TeacherConfig teacher;
  bool freeze_bn = false;
  // aggregator.kind instance: a tile batch draws its tiles from the images of the
  // optimizer step, never two of one image, so BatchNorm's batch statistics span
  // images (pipeline/engine/mixed_instances.hpp).
  bool mix_tiles = false;
  // With mix_tiles: train each image's K tiles likeliest to show its label with it
  // and the rest towards "no class" (MixedInstanceOptions::top_k); 0: every tile.
  std::int64_t instance_top_k = 0;
  // With mix_tiles: an optimizer step after every tile batch (each batch's loss is
  // its tiles' mean), the images_per_step images only the pool the batches are dealt
  // from: ordinary minibatch training over tiles, many times the steps of one step
  // per images_per_step images. The schedule still counts images_per_step groups.
  bool step_every_batch = false;
  // The encoder's learning rate as a fraction of lr (the aggregator and head keep lr):
  // below 1 to keep pretrained features while the head learns; 0 freezes the
  // encoder's weights (a linear probe of them).
  double encoder_lr_scale = 1.0;
  // With freeze_bn and a freshly initialised encoder, the running statistics are
  // estimated from this many training images before the first step (0: off).
  std::int64_t bn_calibration_images = 0;
  // A frozen encoder's tile features kept in memory from the first epoch, up to this
  // many MiB per split (pipeline/engine/feature_cache.hpp); 0: encode every epoch.
  std::int64_t feature_cache_mb = 1024;
  BestMetric best_metric = BestMetric::val_accuracy;  // val_accuracy | val_balanced_accuracy | val_loss | val_auc
  // fp32 | bf16 | fp16: the compute type of the encoder's convolutions (float32
  // master weights and activations between layers; see kernels/conv2d.hpp). bf16
  // needs device: cuda or a CPU with AVX512_BF16; fp16 needs device: cuda and uses
  // dynamic loss scaling (loss_scale).
  DType precision = DType::f32;
  LossScaleConfig loss_scale;
  // CUDA: the most device scratch a cuDNN convolution may use; an algorithm needing
  // more is passed over for the fastest that fits (a memory size, "0": none).
  std::string cudnn_workspace = "256MiB";
  std::size_t cudnn_workspace_bytes = std::size_t{256} << 20;
  // Memory a two-pass step may fill with kept activations, so pass 2 recomputes only
  // the tile batches that do not fit (pipeline/plan/recompute_split.hpp): a memory
  // size, "0" (recompute every batch) or "auto" (half the memory available when the
  // run starts). memory_budget_bytes is unset for "auto".
  std::string memory_budget = "auto";
  std::optional<std::size_t> memory_budget_bytes;
  // Writes diagnostics.csv and gradients.csv into the run directory (attention
  // entropy, evidence tiles, gradient norms per weight; pipeline/train/training_diagnostics.hpp).
  bool diagnostics = false;
};

struct DeviceConfig {
  std::string type = "auto";  // cpu | cuda | auto (cuda when a GPU is present)
  std::int64_t index = 0;
  std::int64_t threads = 0;          // CPU threads for reading and preprocessing; 0: all cores
  std::int64_t tiles_in_flight = 0;  // limiter of the tile stream; 0: 4 tile batches
  // CUDA: cap on the device memory the allocator reserves ("2GiB"; empty: none), so a
  // large card behaves as the small one a user has (kernels/core/block_allocator.hpp).
  std::string memory_limit;
  std::size_t memory_limit_bytes = 0;
};

struct OutputConfig {
  std::string dir = "runs/run";
  std::int64_t log_every = 20;  // images between log lines when not on a terminal
};

// Self-supervised pretraining of the encoder before the first epoch, on the training
// images' tiles without their labels: rotation prediction (Gidaris et al., ICLR
// 2018; pipeline/train/pretext.hpp) or SimCLR (Chen et al., ICML 2020;
// pipeline/train/contrastive.hpp). 0 epochs: off.
struct PretrainConfig {
  std::int64_t epochs = 0;
  PretextMethod method = PretextMethod::rotation;
  double lr = 0.0;                   // 0: train.lr
  std::int64_t images_per_step = 0;  // 0: train.images_per_step
  std::int64_t tile_batch = 0;       // 0: train.tile_batch
  // Of the pretext's inputs only; absent: data.normalize. A high pass can make a
  // tile's smooth background useless to the pretext while training sees it whole.
  Normalization normalize = Normalization::dataset;
  // contrastive: NT-Xent's temperature and the projection's output width.
  double temperature = 0.2;
  std::int64_t projection_dim = 64;
};

struct Config {
  DataConfig data;
  TilerConfig tiler;
  YAML::Node model;  // handed to net's model-spec parser unchanged
  AggregatorConfig aggregator;
  TrainConfig train;
  PretrainConfig pretrain;
  DeviceConfig device;
  OutputConfig output;
  std::string source;  // the file it came from ("<string>" otherwise), for messages
};

// Reads and validates; throws bigtrain::Error naming file, line and key on any problem.
Config load_config(const std::string& path, const std::vector<std::string>& overrides = {});
Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides = {});

// Every key a config may hold, dotted ("train.augmentation.flips", "model.stem.kernel"),
// sorted; sections themselves are left out. Taken from what the reader asks for (and
// net's model-spec table), so it cannot drift from the code.
std::vector<std::string> known_config_keys();

// The resolved config as YAML (every default written out); parse_config of it gives
// the same Config.
std::string config_to_yaml(const Config& config);
// One command-line override of a tiler key: `bigtrain infer --overlap 16` is
// {"overlap", "16", "--overlap 16"}; `value` is read as YAML, as --set's values are.
struct TilerOverride {
  std::string key, value, flag;
};
// `base` with the overrides applied, checked by the rules a config file's tiler
// section obeys (errors name `source` and the flag): the one validation of the
// tiling `infer` and `eval` take from a checkpoint.
TilerConfig override_tiler(const TilerConfig& base, const std::vector<TilerOverride>& overrides,
                           const std::string& source);

// Written to a temporary name, then renamed.
void save_config(const Config& config, const std::string& path);

}  // namespace bigtrain
