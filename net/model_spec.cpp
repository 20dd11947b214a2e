#include "net/model_spec.hpp"

#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kernels/core/error.hpp"

namespace bigtrain::net {
namespace {

struct Preset {
  EncoderFamily family;
  BlockType block;
  std::vector<int> stage_blocks;
};

const std::map<std::string, Preset, std::less<>>& presets() {
  static const std::map<std::string, Preset, std::less<>> table = [] {
    std::map<std::string, Preset, std::less<>> t;
    t["resnet18"] = {EncoderFamily::resnet, BlockType::basic, {2, 2, 2, 2}};
    t["resnet34"] = {EncoderFamily::resnet, BlockType::basic, {3, 4, 6, 3}};
    t["resnet50"] = {EncoderFamily::resnet, BlockType::bottleneck, {3, 4, 6, 3}};
    t["resnet101"] = {EncoderFamily::resnet, BlockType::bottleneck, {3, 4, 23, 3}};
    // He et al. 2016, section 4.2: depth 6n + 2, three stages of n blocks.
    for (int depth : {20, 32, 44, 56, 110}) {
      const int n = (depth - 2) / 6;
      t[fmt::format("resnet{}", depth)] = {EncoderFamily::cifar_resnet, BlockType::basic, {n, n, n}};
    }
    t["small"] = {EncoderFamily::small, BlockType::basic, {}};
    return t;
  }();
  return table;
}

std::string location(std::string_view source, const YAML::Node& node) {
  const YAML::Mark mark = node.Mark();
  // Nodes built in code or by YAML::Clone carry a null or all-zero mark: naming
  // "line 1" for them would send the user to the wrong line, so name the source only
  // (this also drops the line of a document's very first token, which is line 1).
  if (mark.is_null() || (mark.pos == 0 && mark.line == 0 && mark.column == 0)) return std::string(source);
  return fmt::format("{}:{}", source, mark.line + 1);
}

template <typename T>
T read_scalar(const YAML::Node& node, std::string_view source, std::string_view key, std::string_view expected) {
  BT_CHECK(node.IsScalar(), "{}: model.{} must be {}", location(source, node), key, expected);
  try {
    return node.as<T>();
  } catch (const YAML::Exception&) {
    throw Error(fmt::format("{}: model.{} must be {}, got '{}'", location(source, node), key, expected,
                            node.Scalar()));
  }
}

int read_int(const YAML::Node& node, std::string_view source, std::string_view key, int min) {
  const int value = read_scalar<int>(node, source, key, fmt::format("an integer >= {}", min));
  if (value < min)
    throw Error(fmt::format("{}: model.{} must be an integer >= {}, got {}", location(source, node), key, min, value));
  return value;
}

void reject_unknown_keys(const YAML::Node& map, std::string_view source, std::string_view section,
                         const std::vector<std::string>& valid) {
  for (const auto& entry : map) {
    const std::string key = entry.first.as<std::string>();
    if (std::find(valid.begin(), valid.end(), key) == valid.end())
      throw Error(fmt::format("{}: unknown key '{}' in {}; valid keys: {}", location(source, entry.first), key, section,
                              fmt::join(valid, ", ")));
  }
}

const std::vector<std::string> kModelKeys = {"preset",      "in_channels",        "width",      "stem",
                                             "num_classes", "zero_init_residual", "pretrained", "norm",
                                             "norm_groups"};
const std::vector<std::string> kStemKeys = {"kernel", "stride", "padding", "maxpool"};

}  // namespace

const char* norm_kind_name(NormKind kind) { return kind == NormKind::group ? "group" : "batch"; }

std::vector<std::string> model_spec_keys() {
  std::vector<std::string> keys;
  for (const auto& key : kModelKeys)
    if (key != "stem") keys.push_back(key);
  for (const auto& key : kStemKeys) keys.push_back("stem." + key);
  return keys;
}

const std::vector<std::string>& EncoderSpec::preset_names() {
  static const std::vector<std::string> names = {"resnet18", "resnet34", "resnet50", "resnet101", "resnet20",
                                                 "resnet32", "resnet44", "resnet56", "resnet110", "small"};
  return names;
}

EncoderSpec EncoderSpec::preset_spec(std::string_view name) {
  auto it = presets().find(name);
  BT_CHECK(it != presets().end(), "unknown model preset '{}'; valid presets: {}", name,
           fmt::join(preset_names(), ", "));
  EncoderSpec spec;
  spec.preset = std::string(name);
  spec.family = it->second.family;
  spec.block = it->second.block;
  spec.stage_blocks = it->second.stage_blocks;
  switch (spec.family) {
    case EncoderFamily::resnet:
      spec.stage_planes = {64, 128, 256, 512};
      spec.stem_channels = 64;
      spec.stem = {7, 2, 3, true};
      break;
    case EncoderFamily::cifar_resnet:
      spec.stage_planes = {16, 32, 64};
      spec.stem_channels = 16;
      spec.stem = {3, 1, 1, false};
      break;
    case EncoderFamily::small:
      // Stem plus three stride-2 stages, 3x3 kernels: 16, 32, 48, 64 channels.
      spec.stage_planes = {32, 48, 64};
      spec.stem_channels = 16;
      spec.stem = {3, 2, 1, false};
      break;
  }
  return spec;
}

std::int64_t EncoderSpec::scaled(std::int64_t channels) const {
  return std::max<std::int64_t>(1, std::llround(static_cast<double>(channels) * width));
}

std::int64_t EncoderSpec::feature_dim() const { return scaled(stage_planes.back()) * expansion(); }

ModelSpec model_spec_from_yaml(const YAML::Node& node, std::string_view source) {
  BT_CHECK(node.IsMap(), "{}: `model` must be a mapping with at least `preset`", location(source, node));
  reject_unknown_keys(node, source, "model", kModelKeys);
  ModelSpec spec;
  std::string preset = "resnet18";
  if (node["preset"]) {
    preset = read_scalar<std::string>(node["preset"], source, "preset", "a preset name");
    if (!presets().contains(preset))
      throw Error(fmt::format("{}: unknown model.preset '{}'; valid presets: {}", location(source, node["preset"]),
                              preset, fmt::join(EncoderSpec::preset_names(), ", ")));
  }
  spec.encoder = EncoderSpec::preset_spec(preset);
  EncoderSpec& encoder = spec.encoder;
  if (node["in_channels"]) encoder.in_channels = read_int(node["in_channels"], source, "in_channels", 1);
  if (node["width"]) {
    encoder.width = read_scalar<double>(node["width"], source, "width", "a number > 0");
    if (!(encoder.width > 0.0 && std::isfinite(encoder.width)))
      throw Error(fmt::format("{}: model.width must be a number > 0, got {}", location(source, node["width"]),
                              encoder.width));
  }
  if (const YAML::Node stem = node["stem"]) {
    BT_CHECK(stem.IsMap(), "{}: model.stem must be a mapping with keys kernel, stride, padding, maxpool",
             location(source, stem));
    reject_unknown_keys(stem, source, "model.stem", kStemKeys);
    if (stem["kernel"]) {
      encoder.stem.kernel = read_int(stem["kernel"], source, "stem.kernel", 1);
      encoder.stem.padding = encoder.stem.kernel / 2;  // "same"-style unless given
    }
    if (stem["stride"]) encoder.stem.stride = read_int(stem["stride"], source, "stem.stride", 1);
    if (stem["padding"]) encoder.stem.padding = read_int(stem["padding"], source, "stem.padding", 0);
    if (stem["maxpool"]) encoder.stem.maxpool = read_scalar<bool>(stem["maxpool"], source, "stem.maxpool", "true or false");
  }
  if (node["zero_init_residual"])
    encoder.zero_init_residual =
        read_scalar<bool>(node["zero_init_residual"], source, "zero_init_residual", "true or false");
  if (node["norm"]) {
    const auto norm = read_scalar<std::string>(node["norm"], source, "norm", "batch or group");
    if (norm != "batch" && norm != "group")
      throw Error(fmt::format("{}: model.norm must be batch or group, got '{}'", location(source, node["norm"]), norm));
    encoder.norm = norm == "group" ? NormKind::group : NormKind::batch;
  }
  if (node["norm_groups"]) encoder.norm_groups = read_int(node["norm_groups"], source, "norm_groups", 1);
  if (node["num_classes"]) spec.num_classes = read_int(node["num_classes"], source, "num_classes", 1);
  if (node["pretrained"]) spec.pretrained = read_scalar<std::string>(node["pretrained"], source, "pretrained", "a path");
  return spec;
}

ModelSpec model_spec_from_yaml_string(std::string_view yaml, std::string_view source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& error) {
    throw Error(fmt::format("{}:{}: invalid YAML: {}", source, error.mark.line + 1, error.msg));
  }
  return model_spec_from_yaml(root, source);
}

YAML::Node to_yaml(const ModelSpec& spec) {
  YAML::Node node;
  node["preset"] = spec.encoder.preset;
  node["in_channels"] = spec.encoder.in_channels;
  node["width"] = spec.encoder.width;
  node["stem"]["kernel"] = spec.encoder.stem.kernel;
  node["stem"]["stride"] = spec.encoder.stem.stride;
  node["stem"]["padding"] = spec.encoder.stem.padding;
  node["stem"]["maxpool"] = spec.encoder.stem.maxpool;
  node["num_classes"] = spec.num_classes;
  node["zero_init_residual"] = spec.encoder.zero_init_residual;
  node["norm"] = norm_kind_name(spec.encoder.norm);
  node["norm_groups"] = spec.encoder.norm_groups;
  if (!spec.pretrained.empty()) node["pretrained"] = spec.pretrained;
  return node;
}

std::string to_yaml_string(const ModelSpec& spec) {
  YAML::Emitter emitter;
  emitter << to_yaml(spec);
  return emitter.c_str();
}

}  // namespace bigtrain::net
