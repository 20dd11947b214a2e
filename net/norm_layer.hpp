#pragma once
// What the encoder's blocks need of a normalisation layer, whichever it is
// (BatchNorm2d, GroupNorm): the affine weight that zero_init_residual zeroes.
#include <cstdint>
#include <memory>
#include <string>

#include "net/layer.hpp"
#include "net/model_spec.hpp"
#include "net/parameter.hpp"
#include "net/relu.hpp"

namespace bigtrain::net {

class NormLayer : public Layer {
 public:
  using Layer::Layer;
  virtual Parameter& weight() = 0;
  virtual Parameter& bias() = 0;

  // This layer, then `relu` on its output: where the layer can, in one pass over
  // memory each way (BatchNorm2d), else the two layers in turn. The backward undoes
  // the most recent kept forward_with_relu.
  virtual Tensor forward_with_relu(const Tensor& x, ReLU& relu, const ForwardContext& ctx) {
    return relu.forward(forward(x, ctx), ctx);
  }
  virtual Tensor backward_with_relu(const Tensor& dy, ReLU& relu) { return backward(relu.backward(dy)); }
  // The end of a residual block: relu(this(x) + shortcut). `relu` keeps its output,
  // so its backward gives the gradient at the sum, which the shortcut shares;
  // this layer's backward then runs as after forward.
  virtual Tensor forward_add_relu(const Tensor& x, const Tensor& shortcut, ReLU& relu, const ForwardContext& ctx);
};

struct NormChoice {
  NormKind kind = NormKind::batch;
  int groups = 32;  // GroupNorm: gcd(groups, channels) per layer
  static NormChoice of(const EncoderSpec& spec) { return {spec.norm, spec.norm_groups}; }
};

// The normalisation `choice` names, over `channels` channels.
std::unique_ptr<NormLayer> make_norm(const NormChoice& choice, std::string name, std::int64_t channels);

}  // namespace bigtrain::net
