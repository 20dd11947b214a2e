#pragma once
// GroupNorm over NCHW, as PyTorch's nn.GroupNorm (Wu & He 2018): each sample's
// channels fall into `groups` groups of channels/groups, each normalised by its own
// mean and variance over (channels/groups) x H x W, then a per-channel affine.
// Nothing is shared between samples, so a tile's output does not depend on which
// tiles share its batch, and training and evaluation compute the same function:
// what weakly labelled tile training needs when batch statistics would couple the
// tiles of one image (docs/learning.md).
#include <cstdint>
#include <memory>

#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels {

struct GroupNormSpec {
  std::int64_t batch = 1, channels = 1, height = 1, width = 1;
  std::int64_t groups = 1;
  float epsilon = 1e-5f;
  Shape input_shape() const { return {batch, channels, height, width}; }
  Shape channel_shape() const { return {channels}; }
  // save_mean and save_invstd: one value per (sample, group).
  Shape statistics_shape() const { return {batch, groups}; }
  std::int64_t group_size() const { return channels / groups * height * width; }
  friend bool operator==(const GroupNormSpec&, const GroupNormSpec&) = default;
};

class GroupNorm {
 public:
  virtual ~GroupNorm() = default;
  // Writes y and each (sample, group)'s mean and 1/sqrt(biased var + eps), which
  // backward needs.
  virtual void forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& save_mean,
                       Tensor& save_invstd) = 0;
  // Gradients through the group statistics; overwrites dx, dgamma, dbeta.
  virtual void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                        const Tensor& save_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) = 0;
};

std::unique_ptr<GroupNorm> make_group_norm(Backend backend, const GroupNormSpec& spec);

}  // namespace bigtrain::kernels
