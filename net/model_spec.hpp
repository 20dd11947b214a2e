#pragma once
// What network to build: a preset plus overrides, read from YAML.
//
//   model:
//     preset: resnet18          # resnet18|resnet34|resnet50|resnet101 (torchvision),
//                               # resnet20|resnet32|resnet44|resnet56|resnet110 (CIFAR, He et al. 2016),
//                               # small (4 conv-bn-relu stages, ~46k parameters, demos and tests)
//     in_channels: 1            # 1 for grayscale
//     width: 1.0                # multiplies every channel count (1.0 keeps torchvision's shapes)
//     stem: {kernel: 11, stride: 4, padding: 5, maxpool: true}   # padding defaults to kernel/2
//     num_classes: 2
//     zero_init_residual: false # last BatchNorm of each block starts at 0 (torchvision's option)
//     norm: batch               # batch (BatchNorm2d) | group (GroupNorm, nothing shared between tiles)
//     norm_groups: 32           # GroupNorm's groups: gcd(norm_groups, channels) per layer
//     pretrained: weights.safetensors   # optional; loaded by the caller with Model::load_state_dict
//
// CIFAR ResNets use option-B shortcuts (1x1 convolution + BatchNorm where the shape
// changes, as torchvision's blocks do) rather than the paper's option A (zero-padded
// identity): the two differ by ~0.1% accuracy in He et al., and B keeps one block
// implementation and torchvision-style names for every preset.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace bigtrain::net {

enum class EncoderFamily { resnet, cifar_resnet, small };
enum class BlockType { basic, bottleneck };
// The normalisation after each convolution. GroupNorm keeps torchvision's names
// (`bn1.weight`, ...), as torchvision's ResNet(norm_layer=...) does.
enum class NormKind { batch, group };
const char* norm_kind_name(NormKind kind);

struct StemSpec {
  int kernel = 7, stride = 2, padding = 3;
  bool maxpool = true;  // 3x3 stride 2 padding 1, as torchvision
  friend bool operator==(const StemSpec&, const StemSpec&) = default;
};

struct EncoderSpec {
  std::string preset = "resnet18";
  EncoderFamily family = EncoderFamily::resnet;
  BlockType block = BlockType::basic;
  std::vector<int> stage_blocks{2, 2, 2, 2};             // blocks per stage (small: unused)
  std::vector<std::int64_t> stage_planes{64, 128, 256, 512};  // before width and expansion
  std::int64_t stem_channels = 64;                     // before width
  std::int64_t in_channels = 3;
  double width = 1.0;
  StemSpec stem;
  bool zero_init_residual = false;
  NormKind norm = NormKind::batch;
  // Wu & He's default; a layer of C channels uses gcd(norm_groups, C) groups, so
  // width-scaled networks (16 channels at width 0.25) keep whole groups.
  int norm_groups = 32;

  // The preset's spec; throws bigtrain::Error listing the presets for an unknown name.
  static EncoderSpec preset_spec(std::string_view name);
  static const std::vector<std::string>& preset_names();
  // Channel count after the width multiplier (rounded, at least 1).
  std::int64_t scaled(std::int64_t channels) const;
  int expansion() const { return block == BlockType::bottleneck ? 4 : 1; }
  // Length of the feature vector the encoder emits per input.
  std::int64_t feature_dim() const;
  friend bool operator==(const EncoderSpec&, const EncoderSpec&) = default;
};

struct ModelSpec {
  EncoderSpec encoder;
  std::int64_t num_classes = 1000;
  std::string pretrained;  // path of a safetensors file, or empty
  friend bool operator==(const ModelSpec&, const ModelSpec&) = default;
};

// Reads a `model` mapping. `source` names the file (or "--set") for messages:
// unknown keys, wrong types and bad values are bigtrain::Error naming source, line
// and the valid choices.
ModelSpec model_spec_from_yaml(const YAML::Node& node, std::string_view source);
// Every key model_spec_from_yaml accepts, the stem's as "stem.kernel" etc. (the
// table it checks against; docs/config.md is tested against it).
std::vector<std::string> model_spec_keys();
ModelSpec model_spec_from_yaml_string(std::string_view yaml, std::string_view source);
// The resolved spec (preset plus every setting), readable by model_spec_from_yaml.
YAML::Node to_yaml(const ModelSpec& spec);
std::string to_yaml_string(const ModelSpec& spec);

}  // namespace bigtrain::net
