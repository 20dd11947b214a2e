#pragma once
// What the encoder's blocks need of a normalisation layer, whichever it is
// (BatchNorm2d, GroupNorm): the affine weight that zero_init_residual zeroes.
#include <cstdint>
#include <memory>
#include <string>

#include "net/layer.hpp"
#include "net/model_spec.hpp"
#include "net/parameter.hpp"

namespace bigtrain::net {

class NormLayer : public Layer {
 public:
  using Layer::Layer;
  virtual Parameter& weight() = 0;
  virtual Parameter& bias() = 0;
};

struct NormChoice {
  NormKind kind = NormKind::batch;
  int groups = 32;  // GroupNorm: gcd(groups, channels) per layer
  static NormChoice of(const EncoderSpec& spec) { return {spec.norm, spec.norm_groups}; }
};

// The normalisation `choice` names, over `channels` channels.
std::unique_ptr<NormLayer> make_norm(const NormChoice& choice, std::string name, std::int64_t channels);

}  // namespace bigtrain::net
