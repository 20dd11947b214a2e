#include "net/encoder.hpp"

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "net/norm_layer.hpp"
#include "net/global_avg_pool.hpp"
#include "net/pool2d.hpp"
#include "net/relu.hpp"
#include "net/residual_block.hpp"

namespace bigtrain::net {

Encoder::Encoder(const EncoderSpec& spec, InitSeed seed) : Sequential(""), spec_(spec) {
  BT_CHECK(spec.in_channels >= 1 && spec.width > 0.0 && spec.stem.kernel >= 1 && spec.stem.stride >= 1 &&
               spec.stem.padding >= 0,
           "encoder '{}': invalid settings (in_channels {}, width {}, stem kernel {} stride {} padding {})",
           spec.preset, spec.in_channels, spec.width, spec.stem.kernel, spec.stem.stride, spec.stem.padding);
  const std::int64_t stem_channels = spec.scaled(spec.stem_channels);
  stem_conv_ = &add(std::make_unique<Conv2d>(
      "conv1", Conv2dOptions::square(spec.in_channels, stem_channels, spec.stem.kernel, spec.stem.stride, spec.stem.padding),
      seed, ConvInit::kaiming_normal_fan_out));
  add(make_norm(NormChoice::of(spec), "bn1", stem_channels));
  add(std::make_unique<ReLU>("relu", /*inplace=*/true));
  if (spec.stem.maxpool) add(std::make_unique<MaxPool2d>("maxpool", Pool2dOptions{3, 2, 1}));
  if (spec.family == EncoderFamily::small)
    build_small(seed);
  else
    build_resnet(seed);
  add(std::make_unique<GlobalAvgPool>("avgpool"));
  set_input_grad(false);
}

// torchvision's ResNet._make_layer: the first block of each stage after the first
// has stride 2 and a projection shortcut; every stage's first block projects when
// the channel count changes (Bottleneck stage 1: 64 -> 256).
void Encoder::build_resnet(InitSeed seed) {
  std::int64_t in_channels = spec_.scaled(spec_.stem_channels);
  std::vector<ResidualBlock*> blocks;
  for (std::size_t stage = 0; stage < spec_.stage_blocks.size(); ++stage) {
    const std::int64_t planes = spec_.scaled(spec_.stage_planes[stage]);
    for (int index = 0; index < spec_.stage_blocks[stage]; ++index) {
      const int stride = (stage > 0 && index == 0) ? 2 : 1;
      const std::string name = fmt::format("layer{}.{}", stage + 1, index);
      ResidualBlock* block;
      if (spec_.block == BlockType::bottleneck)
        block = &add(std::make_unique<Bottleneck>(name, in_channels, planes, stride, seed, NormChoice::of(spec_)));
      else
        block = &add(std::make_unique<BasicBlock>(name, in_channels, planes, stride, seed, NormChoice::of(spec_)));
      in_channels = block->out_channels();
      blocks.push_back(block);
    }
  }
  // zero_init_residual: each block starts as the identity (Goyal et al. 2017).
  if (spec_.zero_init_residual)
    for (ResidualBlock* block : blocks) block->last_bn().weight().value.zero();
}

// Three more conv-bn-relu stages of stride 2 after the stem: small enough for unit
// tests and demos, named layerK.conv / layerK.bn.
void Encoder::build_small(InitSeed seed) {
  std::int64_t in_channels = spec_.scaled(spec_.stem_channels);
  for (std::size_t stage = 0; stage < spec_.stage_planes.size(); ++stage) {
    const std::int64_t out_channels = spec_.scaled(spec_.stage_planes[stage]);
    const std::string prefix = fmt::format("layer{}", stage + 1);
    add(std::make_unique<Conv2d>(prefix + ".conv", Conv2dOptions::square(in_channels, out_channels, 3, 2, 1), seed,
                                 ConvInit::kaiming_normal_fan_out));
    add(make_norm(NormChoice::of(spec_), prefix + ".bn", out_channels));
    add(std::make_unique<ReLU>(prefix + ".relu", /*inplace=*/true));
    in_channels = out_channels;
  }
}

}  // namespace bigtrain::net
