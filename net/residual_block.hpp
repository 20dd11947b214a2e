#pragma once
// torchvision's residual blocks, same structure and state_dict names:
//   BasicBlock:  conv1 3x3 (stride) bn1 relu conv2 3x3 bn2, + shortcut, relu
//   Bottleneck:  conv1 1x1 bn1 relu conv2 3x3 (stride) bn2 relu conv3 1x1 bn3, + shortcut, relu
//                (the stride on the 3x3 convolution: torchvision's "ResNet v1.5")
// The shortcut is the identity, or downsample.0 (1x1 conv, stride) + downsample.1
// (BatchNorm, or the chosen normalisation) when the stride or the channel count changes.
#include <cstdint>
#include <memory>
#include <vector>

#include "net/norm_layer.hpp"
#include "net/conv2d.hpp"
#include "net/layer.hpp"
#include "net/relu.hpp"

namespace bigtrain::net {

// Residual add then ReLU, shared by both blocks.
class ResidualBlock : public Layer {
 public:
  using Layer::Layer;
  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  LayerFootprint describe(const Shape& input, const PlanContext& ctx) const override;
  PlannedTensor plan_forward(MemoryWalk& walk, const PlannedTensor& x) const override;
  // The union of the main branch's and the shortcut's windows.
  ReceptiveField receptive_field(const ForwardContext& ctx) const override;
  void collect_state(StateRefs& refs) override;
  void clear_saved() override;
  std::size_t saved_count() const override;

  bool has_downsample() const { return downsample_conv_ != nullptr; }
  // The normalisation closing the main branch (zero_init_residual sets its weight to 0).
  virtual NormLayer& last_bn() = 0;
  std::int64_t out_channels() const { return out_channels_; }

 protected:
  // Called by subclasses' constructors after building the main branch.
  void make_downsample(std::int64_t in_channels, std::int64_t out_channels, int stride, InitSeed seed,
                       const NormChoice& norm);
  // The main branch up to the input of last_bn(), which forward runs together with
  // the shortcut's add and the block's ReLU.
  virtual Tensor main_forward_before_last_norm(const Tensor& x, const ForwardContext& ctx) = 0;
  virtual Tensor main_backward(const Tensor& dy) = 0;
  // The main branch's layers in the order they run, one after the other; last_bn() last.
  virtual std::vector<const Layer*> main_layers() const = 0;
  virtual void collect_main_state(StateRefs& refs) = 0;
  virtual void clear_main_saved() = 0;
  virtual std::size_t main_saved_count() const = 0;

  std::int64_t out_channels_ = 0;

 private:
  // The whole block as fused ops (net/conv_bn_fusion.hpp).
  bool fuses_end(const ForwardContext& ctx) const;
  Tensor fused_forward(const Tensor& x, const ForwardContext& ctx);

  std::unique_ptr<Conv2d> downsample_conv_;
  std::unique_ptr<NormLayer> downsample_bn_;
  ReLU relu_out_{child_name(*this, "relu_out"), /*inplace=*/true};
  std::vector<Backend> saved_backends_;
};

class BasicBlock final : public ResidualBlock {
 public:
  static constexpr int kExpansion = 1;
  BasicBlock(std::string name, std::int64_t in_channels, std::int64_t planes, int stride, InitSeed seed,
             const NormChoice& norm = {});
  NormLayer& last_bn() override { return *bn2_; }

 private:
  Tensor main_forward_before_last_norm(const Tensor& x, const ForwardContext& ctx) override;
  Tensor main_backward(const Tensor& dy) override;
  std::vector<const Layer*> main_layers() const override;
  void collect_main_state(StateRefs& refs) override;
  void clear_main_saved() override;
  std::size_t main_saved_count() const override;

  std::unique_ptr<Conv2d> conv1_, conv2_;
  std::unique_ptr<NormLayer> bn1_, bn2_;
  ReLU relu1_{child_name(*this, "relu1"), /*inplace=*/true};
};

class Bottleneck final : public ResidualBlock {
 public:
  static constexpr int kExpansion = 4;
  Bottleneck(std::string name, std::int64_t in_channels, std::int64_t planes, int stride, InitSeed seed,
             const NormChoice& norm = {});
  NormLayer& last_bn() override { return *bn3_; }

 private:
  Tensor main_forward_before_last_norm(const Tensor& x, const ForwardContext& ctx) override;
  Tensor main_backward(const Tensor& dy) override;
  std::vector<const Layer*> main_layers() const override;
  void collect_main_state(StateRefs& refs) override;
  void clear_main_saved() override;
  std::size_t main_saved_count() const override;

  std::unique_ptr<Conv2d> conv1_, conv2_, conv3_;
  std::unique_ptr<NormLayer> bn1_, bn2_, bn3_;
  ReLU relu1_{child_name(*this, "relu1"), /*inplace=*/true}, relu2_{child_name(*this, "relu2"), /*inplace=*/true};
};

}  // namespace bigtrain::net
