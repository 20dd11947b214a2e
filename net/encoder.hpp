#pragma once
// A CNN that maps images [N, in_channels, H, W] to one feature vector each,
// [N, feature_dim()], ending with global average pooling: a tile encoder. Built
// from an EncoderSpec (see net/model_spec.hpp) with torchvision's structure and
// state_dict names, so `conv1.weight`, `bn1.*`, `layer1.0.conv1.weight`, ...
// load from and save to PyTorch as they are.
#include <cstdint>
#include <memory>

#include "net/conv2d.hpp"
#include "net/model_spec.hpp"
#include "net/sequential.hpp"

namespace bigtrain::net {

class Encoder final : public Sequential {
 public:
  // nullopt seed: parameters start at zero (weights to be loaded).
  Encoder(const EncoderSpec& spec, InitSeed seed);

  const EncoderSpec& spec() const { return spec_; }
  std::int64_t feature_dim() const { return spec_.feature_dim(); }
  // The first convolution (`conv1`): grayscale transfer adapts its weight.
  Conv2d& stem_conv() { return *stem_conv_; }
  // Whether backward computes the gradient of the input images (off by default:
  // nothing uses it and it costs a full backward-data convolution of the stem).
  void set_input_grad(bool enabled) { stem_conv_->set_input_grad(enabled); }

 private:
  void build_resnet(InitSeed seed);
  void build_small(InitSeed seed);

  EncoderSpec spec_;
  Conv2d* stem_conv_ = nullptr;
};

}  // namespace bigtrain::net
