#pragma once
// nn.BatchNorm2d (momentum 0.1, eps 1e-5): state_dict entries `<name>.weight`,
// `.bias`, `.running_mean`, `.running_var`, `.num_batches_tracked`.
#include <cstdint>
#include <vector>

#include "kernels/batch_norm.hpp"
#include "net/norm_layer.hpp"
#include "net/op_cache.hpp"

namespace bigtrain::net {

class BatchNorm2d final : public NormLayer {
 public:
  static constexpr float kMomentum = 0.1f;
  static constexpr float kEpsilon = 1e-5f;

  // weight 1, bias 0, running_mean 0, running_var 1, as PyTorch.
  BatchNorm2d(std::string name, std::int64_t channels);

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  // Fused (kernels::BatchNormSpec::relu) unless ctx.fuse_norm_relu is off or a
  // relu_input_hook must see the ReLU's input; `relu` then keeps nothing, this layer
  // keeps the output it masks the gradient with (the buffer the next convolution
  // keeps anyway).
  Tensor forward_with_relu(const Tensor& x, ReLU& relu, const ForwardContext& ctx) override;
  Tensor backward_with_relu(const Tensor& dy, ReLU& relu) override;
  // One pass (kernels::BatchNormSpec::residual) under the same conditions as
  // forward_with_relu.
  Tensor forward_add_relu(const Tensor& x, const Tensor& shortcut, ReLU& relu, const ForwardContext& ctx) override;
  // This layer ran frozen inside the convolution before it (Conv2d::forward_fused
  // while training), whose backward computes its gradients. Its backward then only
  // masks the gradient with `relu_output` (the fused ReLU's output; undefined: no
  // ReLU of its own, the gradient passes as it is).
  void keep_fused(Backend backend, const Tensor& relu_output);
  LayerFootprint describe(const Shape& input, const PlanContext& ctx) const override;
  // The plan's row of a keep_fused forward: the convolution wrote the output.
  LayerFootprint describe_fused(const Shape& input, bool masks_relu) const;
  // Per position only with the running statistics (frozen, or not training).
  ReceptiveField receptive_field(const ForwardContext& ctx) const override;
  void collect_state(StateRefs& refs) override;
  void clear_saved() override { saved_.clear(); }
  std::size_t saved_count() const override { return saved_.size(); }

  std::int64_t channels() const { return channels_; }
  Parameter& weight() override { return weight_; }
  Parameter& bias() override { return bias_; }
  Buffer& running_mean() { return running_mean_; }
  Buffer& running_var() { return running_var_; }
  Counter& num_batches_tracked() { return num_batches_tracked_; }

 private:
  kernels::BatchNorm2d& op(Backend backend, const kernels::BatchNormSpec& spec);
  Tensor run_forward(const Tensor& x, const ForwardContext& ctx, bool relu, const Tensor* residual = nullptr);

  struct Saved {
    Backend backend;
    kernels::BatchNormSpec spec;  // spec.relu, spec.residual: what the forward was fused with
    bool batch_statistics;  // false: normalised with the running statistics (frozen or eval)
    Tensor x, save_mean, save_invstd;
    Tensor y;  // the fused ReLU's output, whose signs mask the gradient (spec.backward_masks_relu())
    bool in_convolution = false;  // keep_fused: y (if defined) is all there is
  };
  std::int64_t channels_;
  Parameter weight_, bias_;
  Buffer running_mean_, running_var_;
  Counter num_batches_tracked_;
  OpCache<kernels::BatchNormSpec, kernels::BatchNorm2d> ops_;
  std::vector<Saved> saved_;
};

}  // namespace bigtrain::net
