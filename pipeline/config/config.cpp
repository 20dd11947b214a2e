#include "pipeline/config/config.hpp"

#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "kernels/core/memory_size.hpp"
#include "net/model_spec.hpp"
#include "pipeline/common/atomic_file.hpp"
#include "pipeline/config/config_reader.hpp"

namespace bigtrain {
namespace {

constexpr std::int64_t kIntMax = std::numeric_limits<std::int64_t>::max();
constexpr double kHuge = std::numeric_limits<double>::max();

// Data paths are written relative to the config file, so a config and its data can
// move together; the resolved config holds absolute paths so it works from the run
// directory too.
std::string resolve_path(const std::string& path, const std::filesystem::path& base) {
  if (path.empty()) return path;
  std::filesystem::path p(path);
  if (p.is_relative()) p = base / p;
  return std::filesystem::absolute(p).lexically_normal().string();
}

// A closed choice (choices.hpp), read as a string among the table's spellings (the
// reader's message lists them) and parsed once.
template <typename E>
E read_choice(ConfigSection& s, std::string_view key, E fallback) {
  std::vector<std::string> names;
  for (const auto& choice : choices_of(fallback)) names.emplace_back(choice.name);
  return *parse_choice<E>(s.get_choice(key, std::string(choice_name(fallback)), names));
}

DataConfig read_data(ConfigSection s, const std::filesystem::path& base) {
  DataConfig d;
  d.train = s.get_string("train", "");
  if (d.train.empty()) s.fail("train", "is required: a CSV manifest `path,label` or a folder per class");
  d.train = resolve_path(d.train, base);
  d.val = resolve_path(s.get_string("val", ""), base);
  d.test = resolve_path(s.get_string("test", ""), base);
  d.val_fraction = s.get_double("val_fraction", d.val_fraction, 0.0, 0.9);
  d.classes = s.get_strings("classes", {});
  d.mean = s.get_doubles("mean", d.mean);
  d.std = s.get_doubles("std", d.std);
  if (d.mean.empty()) s.fail("mean", "must hold one value per channel (or one for all)");
  if (d.std.size() != d.mean.size()) s.fail("std", "must have as many values as `mean`");
  for (double v : d.std)
    if (!(v > 0)) s.fail("std", "values must be positive");
  d.normalize = read_choice(s, "normalize", d.normalize);
  d.highpass_sigma = s.get_double("highpass_sigma", d.highpass_sigma, 0.3, 1000.0);
  d.on_bad_image = read_choice(s, "on_bad_image", d.on_bad_image);
  d.max_value = s.get_int("max_value", d.max_value, 0, 65535);
  s.finish();
  return d;
}

TilerConfig read_tiler(ConfigSection s) {
  TilerConfig t;
  t.mode = read_choice(s, "mode", t.mode);
  t.tile = s.get_int("tile", t.tile, 8, 1 << 16);
  t.overlap = s.get_int("overlap", t.overlap, 0, t.tile - 1);
  t.border = read_choice(s, "border", t.border);
  t.level = s.get_int("level", t.level, 0, 64);
  t.downsample = s.get_double("downsample", t.downsample, 1.0, 1024.0);
  t.min_foreground = s.get_double("min_foreground", t.min_foreground, 0.0, 1.0);
  t.foreground = read_choice(s, "foreground", t.foreground);
  t.background = read_choice(s, "background", t.background);
  t.threshold = s.get_int("threshold", t.threshold, -1, 255);
  if (t.background == tiler::BackgroundMode::fixed && t.threshold < 0) s.fail("threshold", "is required with background: fixed (a grey level 0..255)");
  if (t.background == tiler::BackgroundMode::local_contrast && t.threshold == 0) s.fail("threshold", "must be at least 1 with background: local_contrast (or -1: from the noise)");
  t.max_tiles_per_image = s.get_int("max_tiles_per_image", t.max_tiles_per_image, 0, kIntMax);
  t.resize_size = s.get_int("resize_size", t.resize_size, 8, 1 << 16);
  t.resize_cache_mb = s.get_int("resize_cache_mb", t.resize_cache_mb, 0, std::int64_t{1} << 30);
  s.finish();
  return t;
}

AggregatorConfig read_aggregator(ConfigSection s) {
  AggregatorConfig a;
  a.kind = read_choice(s, "kind", a.kind);
  a.hidden = s.get_int("hidden", a.hidden, 1, 1 << 16);
  a.gated = s.get_bool("gated", a.gated);
  a.dropout = s.get_double("dropout", a.dropout, 0.0, 0.95);
  a.top_tiles = s.get_int("top_tiles", a.top_tiles, 0, kIntMax);
  if (a.dropout > 0 && a.kind == net::AggregatorKind::instance)
    s.fail("dropout", "drops features of the pooled image; aggregator.kind instance pools none (it votes with the tiles' "
                      "own predictions)");
  if (a.top_tiles > 0 && a.kind != net::AggregatorKind::attention && a.kind != net::AggregatorKind::instance)
    s.fail("top_tiles", fmt::format("ranks tiles by attention (or, for the instance vote, by the probability of the "
                                    "label); aggregator.kind {} has neither",
                                    choice_name(a.kind)));
  s.finish();
  return a;
}

AugmentationConfig read_augmentation(ConfigSection s) {
  AugmentationConfig a;
  a.flips = s.get_bool("flips", a.flips);
  a.rot90 = s.get_bool("rot90", a.rot90);
  a.brightness = s.get_double("brightness", a.brightness, 0.0, 1.0);
  a.contrast = s.get_double("contrast", a.contrast, 0.0, 1.0);
  a.noise = s.get_double("noise", a.noise, 0.0, 1.0);
  a.rotate = s.get_double("rotate", a.rotate, 0.0, 180.0);
  a.scale = s.get_double("scale", a.scale, 0.0, 0.9);
  a.shift = s.get_double("shift", a.shift, 0.0, 0.5);
  s.finish();
  return a;
}

// A size key ("256MiB", "2 GiB") where 0 is a meaningful setting, which
// parse_memory_size (sizes of things) refuses.
std::size_t read_memory_size_or_zero(ConfigSection& s, std::string_view key, const std::string& text,
                                     std::string_view hint) {
  if (text == "0") return 0;
  try {
    return parse_memory_size(text);
  } catch (const Error& error) {
    s.fail(key, fmt::format("{}{}", error.what(), hint));
  }
}

TrainConfig read_train(ConfigSection s) {
  TrainConfig t;
  t.epochs = s.get_int("epochs", t.epochs, 1, 1'000'000);
  t.images_per_step = s.get_int("images_per_step", t.images_per_step, 1, 1'000'000);
  t.tile_batch = s.get_int("tile_batch", t.tile_batch, 1, 1 << 20);
  t.optimizer = read_choice(s, "optimizer", t.optimizer);
  t.lr = s.get_double("lr", t.lr, 0.0, 100.0);
  t.momentum = s.get_double("momentum", t.momentum, 0.0, 1.0);
  t.weight_decay = s.get_double("weight_decay", t.weight_decay, 0.0, 10.0);
  t.schedule = read_choice(s, "schedule", t.schedule);
  t.warmup_steps = s.get_int("warmup_steps", t.warmup_steps, 0, kIntMax);
  t.step_gamma = s.get_double("step_gamma", t.step_gamma, 0.0, 1.0);
  t.step_every_epochs = s.get_int("step_every_epochs", t.step_every_epochs, 1, kIntMax);
  t.clip_grad_norm = s.get_double("clip_grad_norm", t.clip_grad_norm, 0.0, kHuge);
  t.label_smoothing = s.get_double("label_smoothing", t.label_smoothing, 0.0, 0.99);
  t.augmentation = read_augmentation(s.section("augmentation"));
  t.seed = s.get_u64("seed", t.seed);
  {
    ConfigSection e = s.section("early_stopping");
    t.early_stopping.patience = e.get_int("patience", 0, 0, kIntMax);
    t.early_stopping.min_delta = e.get_double("min_delta", 0.0, 0.0, kHuge);
    e.finish();
  }
  {
    ConfigSection i = s.section("instance_loss");
    t.instance_loss.k = i.get_int("k", t.instance_loss.k, 0, kIntMax);
    t.instance_loss.weight = i.get_double("weight", t.instance_loss.weight, 0.0, 100.0);
    i.finish();
  }
  {
    ConfigSection teacher = s.section("teacher");
    t.teacher.checkpoint = teacher.get_string("checkpoint", "");
    t.teacher.top = teacher.get_int("top", t.teacher.top, 1, kIntMax);
    teacher.finish();
  }
  t.freeze_bn = s.get_bool("freeze_bn", t.freeze_bn);
  t.mix_tiles = s.get_bool("mix_tiles", t.mix_tiles);
  t.instance_top_k = s.get_int("instance_top_k", t.instance_top_k, 0, kIntMax);
  t.step_every_batch = s.get_bool("step_every_batch", t.step_every_batch);
  t.encoder_lr_scale = s.get_double("encoder_lr_scale", t.encoder_lr_scale, 0.0, 100.0);
  t.bn_calibration_images = s.get_int("bn_calibration_images", t.bn_calibration_images, 0, kIntMax);
  t.feature_cache_mb = s.get_int("feature_cache_mb", t.feature_cache_mb, 0, std::int64_t{1} << 30);
  t.diagnostics = s.get_bool("diagnostics", t.diagnostics);
  t.best_metric = read_choice(s, "best_metric", t.best_metric);
  t.precision = read_choice(s, "precision", t.precision);
  {
    ConfigSection l = s.section("loss_scale");
    // Powers of two keep scaling and unscaling exact; GradScaler allows any value.
    t.loss_scale.init = l.get_double("init", t.loss_scale.init, 1.0, 1e30);
    t.loss_scale.growth_interval = l.get_int("growth_interval", t.loss_scale.growth_interval, 1, kIntMax);
    l.finish();
  }
  t.cudnn_workspace = s.get_string("cudnn_workspace", t.cudnn_workspace);
  // 0 is a choice: only the algorithms that need no scratch.
  t.cudnn_workspace_bytes = read_memory_size_or_zero(s, "cudnn_workspace", t.cudnn_workspace, "");
  t.memory_budget = s.get_string("memory_budget", t.memory_budget);
  if (t.memory_budget == "auto")
    t.memory_budget_bytes.reset();
  else
    t.memory_budget_bytes = read_memory_size_or_zero(s, "memory_budget", t.memory_budget,
                                                     " (or \"auto\", or 0 to recompute every tile batch)");
  s.finish();
  return t;
}

DeviceConfig read_device(ConfigSection s) {
  DeviceConfig d;
  d.type = s.get_choice("type", d.type, {"cpu", "cuda", "auto"});
  d.index = s.get_int("index", d.index, 0, 1024);
  d.threads = s.get_int("threads", d.threads, 0, 4096);
  d.tiles_in_flight = s.get_int("tiles_in_flight", d.tiles_in_flight, 0, 1 << 20);
  d.memory_limit = s.get_string("memory_limit", d.memory_limit);
  if (!d.memory_limit.empty()) {
    try {
      d.memory_limit_bytes = parse_memory_size(d.memory_limit);
    } catch (const Error& error) {
      s.fail("memory_limit", error.what());
    }
    // Below this not even the weights and workspace of a small model fit, so a
    // smaller figure is a typo (512KiB for 512MiB) rather than a wish.
    if (d.memory_limit_bytes < (std::size_t{64} << 20))
      s.fail("memory_limit", fmt::format("{} is below 64MiB, too little for any model's weights and workspace",
                                         d.memory_limit));
  }
  s.finish();
  return d;
}

PretrainConfig read_pretrain(ConfigSection s, Normalization data_normalize) {
  PretrainConfig p;
  p.normalize = read_choice(s, "normalize", data_normalize);
  p.tile_batch = s.get_int("tile_batch", p.tile_batch, 0, 1'000'000);
  p.epochs = s.get_int("epochs", p.epochs, 0, 1'000'000);
  p.method = read_choice(s, "method", p.method);
  p.temperature = s.get_double("temperature", p.temperature, 1e-3, 10.0);
  p.projection_dim = s.get_int("projection_dim", p.projection_dim, 1, 65536);
  p.lr = s.get_double("lr", p.lr, 0.0, 100.0);
  p.images_per_step = s.get_int("images_per_step", p.images_per_step, 0, 1'000'000);
  s.finish();
  return p;
}

OutputConfig read_output(ConfigSection s) {
  OutputConfig o;
  o.dir = s.get_string("dir", o.dir);
  if (o.dir.empty()) s.fail("dir", "must name a directory");
  o.log_every = s.get_int("log_every", o.log_every, 1, kIntMax);
  s.finish();
  return o;
}

void emit_tiler(YAML::Emitter& out, const TilerConfig& t) {
  out << YAML::BeginMap;
  out << YAML::Key << "mode" << YAML::Value << std::string(choice_name(t.mode));
  out << YAML::Key << "tile" << YAML::Value << t.tile;
  out << YAML::Key << "overlap" << YAML::Value << t.overlap;
  out << YAML::Key << "border" << YAML::Value << std::string(choice_name(t.border));
  out << YAML::Key << "level" << YAML::Value << t.level;
  out << YAML::Key << "downsample" << YAML::Value << t.downsample;
  out << YAML::Key << "min_foreground" << YAML::Value << t.min_foreground;
  out << YAML::Key << "foreground" << YAML::Value << std::string(choice_name(t.foreground));
  out << YAML::Key << "background" << YAML::Value << std::string(choice_name(t.background));
  out << YAML::Key << "threshold" << YAML::Value << t.threshold;
  out << YAML::Key << "max_tiles_per_image" << YAML::Value << t.max_tiles_per_image;
  out << YAML::Key << "resize_size" << YAML::Value << t.resize_size;
  out << YAML::Key << "resize_cache_mb" << YAML::Value << t.resize_cache_mb;
  out << YAML::EndMap;
}

// model.norm as written (the model spec is parsed later, by net/model_spec.cpp,
// which rejects a bad value with its line).
bool uses_group_norm(const Config& config) {
  if (!config.model.IsMap()) return false;
  // An absent key is an invalid node, on which anything but IsDefined() throws.
  const YAML::Node norm = config.model["norm"];
  return norm.IsDefined() && norm.IsScalar() && norm.Scalar() == "group";
}

// tiler.mode stream runs the whole-image network tile by tile (net/streaming.hpp):
// only what is local to a pixel's receptive field can be, and one image is the batch.
void check_streaming(const Config& config, ConfigSection& top, ConfigSection& train) {
  if (uses_group_norm(config))
    top.fail("model", "norm: group cannot stream (GroupNorm normalises by the mean and variance of the whole "
                      "feature map, which a streaming tile does not see); use norm: batch with freeze_bn: true");
  if (!config.train.freeze_bn)
    train.fail("freeze_bn", "tiler.mode stream needs freeze_bn: true (BatchNorm with batch statistics normalises "
                            "each streaming tile by its own statistics, not the image's, so the streamed network "
                            "would not be the whole-image one)");
  const AggregatorConfig& a = config.aggregator;
  if (a.kind == net::AggregatorKind::instance)
    top.section("aggregator").fail("kind", "instance is not available with tiler.mode stream (the head sees the "
                                           "feature map's cells through mean, max or attention pooling)");
  if (a.top_tiles > 0)
    top.section("aggregator").fail("top_tiles", "must be 0 with tiler.mode stream (every cell of the map is pooled)");
  const AugmentationConfig& g = config.train.augmentation;
  if (g.flips || g.rot90 || g.brightness > 0 || g.contrast > 0 || g.noise > 0 || g.affine())
    train.fail("augmentation", "is drawn per tile, and a streaming tile is not an instance: with tiler.mode "
                               "stream leave every augmentation off");
  if (config.tiler.max_tiles_per_image > 0)
    top.section("tiler").fail("max_tiles_per_image", "must be 0 with tiler.mode stream (the whole image is the input)");
}

Config parse_node(YAML::Node root, std::shared_ptr<ConfigOrigin> origin, const std::filesystem::path& base) {
  ConfigSection top(root, "", origin);
  if (root.IsDefined() && !root.IsNull() && !root.IsMap())
    throw Error(fmt::format("{}: a config is a mapping of sections (data, tiler, model, aggregator, train, device, "
                            "output)",
                            origin->file));
  Config config;
  config.source = origin->file;
  config.data = read_data(top.section("data"), base);
  config.tiler = read_tiler(top.section("tiler"));
  if (YAML::Node model = top.get_node("model"); model.IsDefined()) {
    if (!model.IsMap()) top.fail("model", "must be a mapping (the model spec)");
    config.model = YAML::Clone(model);
    // Relative to the config file, as the data and train.teacher are: a chain of
    // configs names its earlier stages' checkpoints wherever it is run from.
    if (YAML::Node pretrained = config.model["pretrained"]; pretrained.IsScalar())
      pretrained = resolve_path(pretrained.as<std::string>(), base);
  }
  config.aggregator = read_aggregator(top.section("aggregator"));
  ConfigSection train = top.section("train");
  config.train = read_train(train);
  config.device = read_device(top.section("device"));
  // Pass 2 runs the encoder on the selected tiles only, in smaller batches: batch
  // statistics would then differ from pass 1's (GroupNorm shares nothing between tiles).
  if (config.aggregator.top_tiles > 0 && !config.train.freeze_bn && !uses_group_norm(config))
    train.fail("freeze_bn", "aggregator.top_tiles needs freeze_bn: true or model.norm: group (pass 2 computes the "
                            "selected tiles in sub-batches, whose BatchNorm batch statistics would differ from "
                            "pass 1's)");
  if (config.tiler.mode == TilerMode::stream) check_streaming(config, top, train);
  // Only the instance loss is a sum over tiles that need nothing of each other.
  if (config.train.mix_tiles && (config.aggregator.kind != net::AggregatorKind::instance ||
                                 config.aggregator.top_tiles > 0 || config.tiler.mode == TilerMode::stream))
    train.fail("mix_tiles", "mixing several images' tiles in one batch needs aggregator.kind instance without "
                            "top_tiles, and tiles (tiler.mode tiles or resize; the other aggregators pool one "
                            "image's tiles)");
  if (config.train.instance_loss.k > 0 && config.aggregator.kind != net::AggregatorKind::attention)
    train.section("instance_loss").fail("k", "picks each image's most and least attended tiles: it needs "
                                             "aggregator.kind attention");
  if (!config.train.teacher.checkpoint.empty()) {
    config.train.teacher.checkpoint = resolve_path(config.train.teacher.checkpoint, base);
    if (config.tiler.mode != TilerMode::tiles)
      train.section("teacher").fail("checkpoint", "picks tiles of each training image: it needs tiler.mode tiles");
    if (config.tiler.max_tiles_per_image > 0)
      top.section("tiler").fail("max_tiles_per_image", "must be 0 with train.teacher (the teacher picks the tiles "
                                                       "instead of a random subset)");
  }
  if (config.train.instance_top_k > 0 && !config.train.mix_tiles)
    train.fail("instance_top_k", "selects tiles within the mixed tile batches of the instance aggregator: it needs "
                                 "mix_tiles: true (and aggregator.kind instance)");
  if (config.train.step_every_batch && !config.train.mix_tiles)
    train.fail("step_every_batch", "steps after every mixed tile batch of the instance aggregator: it needs "
                                   "mix_tiles: true (and aggregator.kind instance)");
  // bf16 on the CPU depends on the machine (AVX512_BF16): the trainer checks it, as
  // it checks fp16 with device: auto on a machine without a GPU.
  if (config.train.precision == DType::f16 && config.device.type == "cpu")
    train.fail("precision", "fp16 needs device: cuda (the CPU backend computes in float32, or in bf16 on CPUs "
                            "with AVX512_BF16); use precision fp32 or bf16 with device: cpu");
  {
    ConfigSection pretrain = top.section("pretrain");
    config.pretrain = read_pretrain(pretrain, config.data.normalize);
    // A quarter turn must map a tile onto itself, and stream mode has no tiles.
    if (config.pretrain.epochs > 0 && config.tiler.mode == TilerMode::stream)
      pretrain.fail("epochs", "pretraining trains on tiles; tiler.mode stream has none");
  }
  config.output = read_output(top.section("output"));
  top.finish();
  return config;
}

Config parse_with_origin(const std::string& text, const std::string& source_name,
                         const std::vector<std::string>& overrides, const std::filesystem::path& base) {
  auto origin = std::make_shared<ConfigOrigin>();
  origin->file = source_name;
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& error) {
    throw Error(fmt::format("{}:{}:{}: not valid YAML: {}", source_name, error.mark.line + 1, error.mark.column + 1,
                            error.msg));
  }
  if (!root.IsDefined() || root.IsNull()) root = YAML::Node(YAML::NodeType::Map);
  for (const auto& assignment : overrides) apply_override(root, assignment, *origin);
  return parse_node(root, origin, base);
}

}  // namespace

Config load_config(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open the config file", path));
  std::stringstream text;
  text << in.rdbuf();
  const auto base = std::filesystem::absolute(std::filesystem::path(path)).parent_path();
  return parse_with_origin(text.str(), path, overrides, base);
}

Config parse_config(const std::string& yaml_text, const std::string& source_name,
                    const std::vector<std::string>& overrides) {
  return parse_with_origin(yaml_text, source_name, overrides, std::filesystem::current_path());
}

std::vector<std::string> known_config_keys() {
  auto origin = std::make_shared<ConfigOrigin>();
  origin->file = "<known keys>";
  origin->asked_keys = std::make_shared<std::set<std::string>>();
  YAML::Node root = YAML::Load("data: {train: known-keys.csv}");
  parse_node(root, origin, std::filesystem::current_path());
  std::set<std::string> keys = *origin->asked_keys;
  keys.erase("model");  // handed to net's parser, whose table names its keys
  for (const auto& key : net::model_spec_keys()) keys.insert("model." + key);
  std::vector<std::string> leaves;
  for (const auto& key : keys) {
    const auto next = keys.upper_bound(key);
    const bool is_section = next != keys.end() && next->starts_with(key + ".");
    if (!is_section) leaves.push_back(key);
  }
  return leaves;
}

std::string config_to_yaml(const Config& c) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "data" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "train" << YAML::Value << c.data.train;
  if (!c.data.val.empty()) out << YAML::Key << "val" << YAML::Value << c.data.val;
  if (!c.data.test.empty()) out << YAML::Key << "test" << YAML::Value << c.data.test;
  out << YAML::Key << "val_fraction" << YAML::Value << c.data.val_fraction;
  out << YAML::Key << "classes" << YAML::Value << YAML::Flow << c.data.classes;
  out << YAML::Key << "mean" << YAML::Value << YAML::Flow << c.data.mean;
  out << YAML::Key << "std" << YAML::Value << YAML::Flow << c.data.std;
  out << YAML::Key << "normalize" << YAML::Value << std::string(choice_name(c.data.normalize));
  out << YAML::Key << "highpass_sigma" << YAML::Value << c.data.highpass_sigma;
  out << YAML::Key << "on_bad_image" << YAML::Value << std::string(choice_name(c.data.on_bad_image));
  out << YAML::Key << "max_value" << YAML::Value << c.data.max_value;
  out << YAML::EndMap;

  out << YAML::Key << "tiler" << YAML::Value;
  emit_tiler(out, c.tiler);

  if (c.model.IsDefined() && !c.model.IsNull()) out << YAML::Key << "model" << YAML::Value << c.model;

  out << YAML::Key << "aggregator" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "kind" << YAML::Value << std::string(choice_name(c.aggregator.kind));
  out << YAML::Key << "hidden" << YAML::Value << c.aggregator.hidden;
  out << YAML::Key << "gated" << YAML::Value << c.aggregator.gated;
  out << YAML::Key << "dropout" << YAML::Value << c.aggregator.dropout;
  out << YAML::Key << "top_tiles" << YAML::Value << c.aggregator.top_tiles;
  out << YAML::EndMap;

  const TrainConfig& t = c.train;
  out << YAML::Key << "train" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "epochs" << YAML::Value << t.epochs;
  out << YAML::Key << "images_per_step" << YAML::Value << t.images_per_step;
  out << YAML::Key << "tile_batch" << YAML::Value << t.tile_batch;
  out << YAML::Key << "optimizer" << YAML::Value << std::string(choice_name(t.optimizer));
  out << YAML::Key << "lr" << YAML::Value << t.lr;
  out << YAML::Key << "momentum" << YAML::Value << t.momentum;
  out << YAML::Key << "weight_decay" << YAML::Value << t.weight_decay;
  out << YAML::Key << "schedule" << YAML::Value << std::string(choice_name(t.schedule));
  out << YAML::Key << "warmup_steps" << YAML::Value << t.warmup_steps;
  out << YAML::Key << "step_gamma" << YAML::Value << t.step_gamma;
  out << YAML::Key << "step_every_epochs" << YAML::Value << t.step_every_epochs;
  out << YAML::Key << "clip_grad_norm" << YAML::Value << t.clip_grad_norm;
  out << YAML::Key << "label_smoothing" << YAML::Value << t.label_smoothing;
  out << YAML::Key << "augmentation" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "flips" << YAML::Value << t.augmentation.flips;
  out << YAML::Key << "rot90" << YAML::Value << t.augmentation.rot90;
  out << YAML::Key << "brightness" << YAML::Value << t.augmentation.brightness;
  out << YAML::Key << "contrast" << YAML::Value << t.augmentation.contrast;
  out << YAML::Key << "noise" << YAML::Value << t.augmentation.noise;
  out << YAML::Key << "rotate" << YAML::Value << t.augmentation.rotate;
  out << YAML::Key << "scale" << YAML::Value << t.augmentation.scale;
  out << YAML::Key << "shift" << YAML::Value << t.augmentation.shift;
  out << YAML::EndMap;
  out << YAML::Key << "seed" << YAML::Value << t.seed;
  out << YAML::Key << "early_stopping" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "patience" << YAML::Value << t.early_stopping.patience;
  out << YAML::Key << "min_delta" << YAML::Value << t.early_stopping.min_delta;
  out << YAML::EndMap;
  out << YAML::Key << "instance_loss" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "k" << YAML::Value << t.instance_loss.k;
  out << YAML::Key << "weight" << YAML::Value << t.instance_loss.weight;
  out << YAML::EndMap;
  out << YAML::Key << "teacher" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "checkpoint" << YAML::Value << t.teacher.checkpoint;
  out << YAML::Key << "top" << YAML::Value << t.teacher.top;
  out << YAML::EndMap;
  out << YAML::Key << "freeze_bn" << YAML::Value << t.freeze_bn;
  out << YAML::Key << "mix_tiles" << YAML::Value << t.mix_tiles;
  out << YAML::Key << "instance_top_k" << YAML::Value << t.instance_top_k;
  out << YAML::Key << "step_every_batch" << YAML::Value << t.step_every_batch;
  out << YAML::Key << "encoder_lr_scale" << YAML::Value << t.encoder_lr_scale;
  out << YAML::Key << "bn_calibration_images" << YAML::Value << t.bn_calibration_images;
  out << YAML::Key << "feature_cache_mb" << YAML::Value << t.feature_cache_mb;
  out << YAML::Key << "diagnostics" << YAML::Value << t.diagnostics;
  out << YAML::Key << "best_metric" << YAML::Value << std::string(choice_name(t.best_metric));
  out << YAML::Key << "precision" << YAML::Value << std::string(choice_name(t.precision));
  out << YAML::Key << "loss_scale" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "init" << YAML::Value << t.loss_scale.init;
  out << YAML::Key << "growth_interval" << YAML::Value << t.loss_scale.growth_interval;
  out << YAML::EndMap;
  out << YAML::Key << "cudnn_workspace" << YAML::Value << t.cudnn_workspace;
  out << YAML::Key << "memory_budget" << YAML::Value << t.memory_budget;
  out << YAML::EndMap;

  out << YAML::Key << "device" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "type" << YAML::Value << c.device.type;
  out << YAML::Key << "index" << YAML::Value << c.device.index;
  out << YAML::Key << "threads" << YAML::Value << c.device.threads;
  out << YAML::Key << "tiles_in_flight" << YAML::Value << c.device.tiles_in_flight;
  out << YAML::Key << "memory_limit" << YAML::Value << c.device.memory_limit;
  out << YAML::EndMap;

  out << YAML::Key << "pretrain" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "epochs" << YAML::Value << c.pretrain.epochs;
  out << YAML::Key << "method" << YAML::Value << std::string(choice_name(c.pretrain.method));
  out << YAML::Key << "temperature" << YAML::Value << c.pretrain.temperature;
  out << YAML::Key << "projection_dim" << YAML::Value << c.pretrain.projection_dim;
  out << YAML::Key << "lr" << YAML::Value << c.pretrain.lr;
  out << YAML::Key << "images_per_step" << YAML::Value << c.pretrain.images_per_step;
  out << YAML::Key << "tile_batch" << YAML::Value << c.pretrain.tile_batch;
  out << YAML::Key << "normalize" << YAML::Value << std::string(choice_name(c.pretrain.normalize));
  out << YAML::EndMap;

  out << YAML::Key << "output" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "dir" << YAML::Value << c.output.dir;
  out << YAML::Key << "log_every" << YAML::Value << c.output.log_every;
  out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

TilerConfig override_tiler(const TilerConfig& base, const std::vector<TilerOverride>& overrides,
                           const std::string& source) {
  auto origin = std::make_shared<ConfigOrigin>();
  origin->file = source;
  YAML::Emitter out;
  out << YAML::BeginMap << YAML::Key << "tiler" << YAML::Value;
  emit_tiler(out, base);
  out << YAML::EndMap;
  YAML::Node root = YAML::Load(out.c_str());
  for (const TilerOverride& o : overrides) {
    apply_override(root, fmt::format("tiler.{}={}", o.key, o.value), *origin);
    origin->overrides["tiler." + o.key] = o.flag;  // errors name the flag the user typed
  }
  ConfigSection top(root, "", origin);
  return read_tiler(top.section("tiler"));
}

void save_config(const Config& config, const std::string& path) {
  write_file_atomically(path, config_to_yaml(config));
}

}  // namespace bigtrain
