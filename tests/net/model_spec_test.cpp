// Model specs from YAML: presets, overrides, the resolved spec round trip, and
// errors that name the source, the line and the valid choices.
#include <gtest/gtest.h>

#include <string>

#include "kernels/core/error.hpp"
#include "net/model_spec.hpp"

namespace bigtrain::net {
namespace {

std::string error_of(const std::string& yaml) {
  try {
    model_spec_from_yaml_string(yaml, "run.yaml");
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected an error for:\n" << yaml;
  return {};
}

TEST(ModelSpec, PresetWithOverrides) {
  const ModelSpec spec = model_spec_from_yaml_string(
      "preset: resnet50\nin_channels: 1\nwidth: 0.5\nstem: {kernel: 11, stride: 4}\nnum_classes: 2\n"
      "zero_init_residual: true\npretrained: imagenet.safetensors\n",
      "run.yaml");
  EXPECT_EQ(spec.encoder.preset, "resnet50");
  EXPECT_EQ(spec.encoder.block, BlockType::bottleneck);
  EXPECT_EQ(spec.encoder.stage_blocks, (std::vector<int>{3, 4, 6, 3}));
  EXPECT_EQ(spec.encoder.in_channels, 1);
  EXPECT_EQ(spec.encoder.width, 0.5);
  EXPECT_EQ(spec.encoder.stem, (StemSpec{11, 4, 5, true}));  // padding defaults to kernel / 2
  EXPECT_EQ(spec.num_classes, 2);
  EXPECT_TRUE(spec.encoder.zero_init_residual);
  EXPECT_EQ(spec.pretrained, "imagenet.safetensors");
  EXPECT_EQ(spec.encoder.feature_dim(), 1024);
}

TEST(ModelSpec, PresetDefaults) {
  const ModelSpec resnet = model_spec_from_yaml_string("preset: resnet18\n", "run.yaml");
  EXPECT_EQ(resnet.encoder.stem, (StemSpec{7, 2, 3, true}));
  EXPECT_EQ(resnet.encoder.in_channels, 3);
  EXPECT_EQ(resnet.num_classes, 1000);
  const ModelSpec cifar = model_spec_from_yaml_string("preset: resnet110\n", "run.yaml");
  EXPECT_EQ(cifar.encoder.family, EncoderFamily::cifar_resnet);
  EXPECT_EQ(cifar.encoder.stage_blocks, (std::vector<int>{18, 18, 18}));
  EXPECT_EQ(cifar.encoder.stem, (StemSpec{3, 1, 1, false}));
  EXPECT_EQ(model_spec_from_yaml_string("preset: small\n", "s").encoder.family, EncoderFamily::small);
  for (const std::string& name : EncoderSpec::preset_names())
    EXPECT_EQ(EncoderSpec::preset_spec(name).preset, name);
}

TEST(ModelSpec, GroupNormIsChosenAndRoundTrips) {
  const ModelSpec batch = model_spec_from_yaml_string("preset: resnet18\n", "run.yaml");
  EXPECT_EQ(batch.encoder.norm, NormKind::batch);
  const ModelSpec group = model_spec_from_yaml_string("preset: resnet18\nnorm: group\nnorm_groups: 8\n", "run.yaml");
  EXPECT_EQ(group.encoder.norm, NormKind::group);
  EXPECT_EQ(group.encoder.norm_groups, 8);
  EXPECT_EQ(model_spec_from_yaml_string(to_yaml_string(group), "resolved"), group);
}

TEST(ModelSpec, ResolvedSpecRoundTrips) {
  const ModelSpec spec = model_spec_from_yaml_string(
      "preset: resnet34\nin_channels: 1\nwidth: 0.75\nstem: {kernel: 5, stride: 3, padding: 1, maxpool: false}\n"
      "num_classes: 7\n",
      "run.yaml");
  const ModelSpec again = model_spec_from_yaml_string(to_yaml_string(spec), "resolved");
  EXPECT_EQ(again, spec);
}

TEST(ModelSpec, UnknownKeyNamesLineAndValidKeys) {
  const std::string message = error_of("preset: resnet18\nin_channel: 1\n");
  EXPECT_NE(message.find("run.yaml:2"), std::string::npos) << message;
  EXPECT_NE(message.find("'in_channel'"), std::string::npos) << message;
  EXPECT_NE(message.find("in_channels"), std::string::npos) << message;  // the valid keys
  const std::string stem = error_of("preset: resnet18\nstem:\n  kernel: 7\n  strides: 2\n");
  EXPECT_NE(stem.find("run.yaml:4"), std::string::npos) << stem;
  EXPECT_NE(stem.find("model.stem"), std::string::npos) << stem;
  EXPECT_NE(stem.find("maxpool"), std::string::npos) << stem;
}

// A node copied with YAML::Clone (or built in code) has no position: the message
// names the source without inventing a line.
TEST(ModelSpec, NodesWithoutPositionNameTheSourceOnly) {
  const YAML::Node original = YAML::Load("model:\n  preset: small\n  colour: red\n");
  try {
    model_spec_from_yaml(YAML::Clone(original["model"]), "run.yaml");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("run.yaml: unknown key 'colour'", 0), 0u) << message;
  }
  try {
    model_spec_from_yaml(original["model"], "run.yaml");
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("run.yaml:3:"), std::string::npos) << error.what();
  }
}

TEST(ModelSpec, BadValuesNameLineAndChoices) {
  const std::string preset = error_of("in_channels: 1\npreset: resnet19\n");
  EXPECT_NE(preset.find("run.yaml:2"), std::string::npos) << preset;
  EXPECT_NE(preset.find("resnet18, resnet34"), std::string::npos) << preset;
  const std::string channels = error_of("preset: small\nin_channels: gray\n");
  EXPECT_NE(channels.find("run.yaml:2"), std::string::npos) << channels;
  EXPECT_NE(channels.find("integer"), std::string::npos) << channels;
  EXPECT_NE(error_of("preset: small\nnum_classes: 0\n").find(">= 1"), std::string::npos);
  EXPECT_NE(error_of("width: -1\n").find("model.width"), std::string::npos);
  EXPECT_NE(error_of("stem: {stride: 0}\n").find("stem.stride"), std::string::npos);
  EXPECT_NE(error_of("stem: {maxpool: maybe}\n").find("true or false"), std::string::npos);
  EXPECT_NE(error_of("norm: layer\n").find("model.norm must be batch or group, got 'layer'"), std::string::npos);
  EXPECT_NE(error_of("norm: group\nnorm_groups: 0\n").find("norm_groups"), std::string::npos);
  EXPECT_NE(error_of("stem: 7\n").find("mapping"), std::string::npos);
  EXPECT_NE(error_of("- resnet18\n").find("mapping"), std::string::npos);
  EXPECT_NE(error_of("preset: [resnet18\n").find("invalid YAML"), std::string::npos);
}

}  // namespace
}  // namespace bigtrain::net
