#pragma once
// nn.GroupNorm (eps 1e-5, affine): state_dict entries `<name>.weight`, `.bias`.
// The same function in training and evaluation, and a tile's output never depends
// on the other tiles of its batch (kernels/group_norm.hpp).
#include <cstdint>
#include <vector>

#include "kernels/group_norm.hpp"
#include "net/norm_layer.hpp"
#include "net/op_cache.hpp"

namespace bigtrain::net {

class GroupNorm final : public NormLayer {
 public:
  static constexpr float kEpsilon = 1e-5f;

  // weight 1, bias 0, as PyTorch. `groups` must divide `channels`.
  GroupNorm(std::string name, std::int64_t groups, std::int64_t channels);

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  LayerFootprint describe(const Shape& input, const PlanContext& ctx) const override;
  // Never per position: every output depends on its whole group's planes.
  ReceptiveField receptive_field(const ForwardContext& ctx) const override;
  void collect_state(StateRefs& refs) override;
  void clear_saved() override { saved_.clear(); }
  std::size_t saved_count() const override { return saved_.size(); }

  std::int64_t groups() const { return groups_; }
  std::int64_t channels() const { return channels_; }
  Parameter& weight() override { return weight_; }
  Parameter& bias() override { return bias_; }

 private:
  kernels::GroupNorm& op(Backend backend, const kernels::GroupNormSpec& spec);
  kernels::GroupNormSpec spec_for(const Shape& input) const;

  struct Saved {
    Backend backend;
    kernels::GroupNormSpec spec;
    Tensor x, save_mean, save_invstd;
  };
  std::int64_t groups_, channels_;
  Parameter weight_, bias_;
  OpCache<kernels::GroupNormSpec, kernels::GroupNorm> ops_;
  std::vector<Saved> saved_;
};

}  // namespace bigtrain::net
