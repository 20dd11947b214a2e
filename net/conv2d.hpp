#pragma once
// nn.Conv2d: state_dict entries `<name>.weight` [out, in/groups, kh, kw] and `<name>.bias` [out].
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/conv2d.hpp"
#include "net/init.hpp"
#include "net/layer.hpp"
#include "net/op_cache.hpp"

namespace bigtrain::net {

struct Conv2dOptions {
  std::int64_t in_channels = 1, out_channels = 1;
  int kernel_h = 1, kernel_w = 1;
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
  int dilation_h = 1, dilation_w = 1;
  int groups = 1;
  bool bias = false;

  // A square kernel with the same stride/padding in both directions.
  static Conv2dOptions square(std::int64_t in, std::int64_t out, int kernel, int stride = 1, int pad = 0,
                              bool bias = false) {
    return {in, out, kernel, kernel, stride, stride, pad, pad, 1, 1, 1, bias};
  }
};

enum class ConvInit {
  pytorch_default,        // nn.Conv2d's own: U(+-1/sqrt(fan_in)) weight and bias
  kaiming_normal_fan_out  // torchvision's ResNet: N(0, 2/fan_out) weight, bias 0
};

class BatchNorm2d;

class Conv2d final : public Layer {
 public:
  // Initialised from the stream (seed, parameter name), see net/init.hpp.
  Conv2d(std::string name, const Conv2dOptions& options, InitSeed seed,
         ConvInit init = ConvInit::pytorch_default);

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  // This convolution, then `bn` (running statistics), then + residual when given,
  // then ReLU when relu, as one op (net/conv_bn_fusion.hpp). With
  // ctx.keep_activations it keeps the input, and backward() then computes `bn`'s
  // gradients too (kernels/frozen_norm_conv.hpp); `bn` keeps the output it masks
  // the gradient with (BatchNorm2d::keep_fused).
  Tensor forward_fused(const Tensor& x, const ForwardContext& ctx, BatchNorm2d& bn, const Tensor* residual,
                       bool relu);
  LayerFootprint describe(const Shape& input, const PlanContext& ctx) const override;
  // The call of forward_fused where it keeps activations: backward also holds the
  // weight-sized tensors of the BatchNorm's gradients (backward_through_frozen_norm).
  LayerFootprint describe_with_frozen_norm(const Shape& input, const PlanContext& ctx) const;
  ReceptiveField receptive_field(const ForwardContext& ctx) const override;
  void collect_state(StateRefs& refs) override;
  void clear_saved() override { saved_.clear(); }
  std::size_t saved_count() const override { return saved_.size(); }

  // Off for a network's first layer: the gradient of the image is never used, and
  // skipping it saves a full backward-data convolution (PyTorch skips it too, the
  // input not requiring grad).
  void set_input_grad(bool enabled) { input_grad_ = enabled; }
  const Conv2dOptions& options() const { return options_; }
  Parameter& weight() { return weight_; }
  Parameter* bias() { return options_.bias ? &bias_ : nullptr; }

 private:
  kernels::Conv2dSpec spec_for(const Shape& x) const;
  kernels::Conv2d& op(Backend backend, const kernels::Conv2dSpec& spec);

  struct Saved {
    Backend backend;
    kernels::Conv2dSpec spec;
    Tensor x;
    BatchNorm2d* frozen_norm = nullptr;  // ran in this convolution's epilogue (forward_fused)
  };
  Tensor backward_through_frozen_norm(Saved& saved, const Tensor& dz);
  Conv2dOptions options_;
  Parameter weight_;
  Parameter bias_;
  bool input_grad_ = true;
  OpCache<kernels::Conv2dSpec, kernels::Conv2d> ops_;
  std::vector<Saved> saved_;
};

}  // namespace bigtrain::net
