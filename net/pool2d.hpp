#pragma once
// nn.MaxPool2d and nn.AvgPool2d (no state_dict entries).
#include <vector>

#include "kernels/pooling.hpp"
#include "net/layer.hpp"
#include "net/op_cache.hpp"

namespace bigtrain::net {

struct Pool2dOptions {
  int kernel = 2, stride = 2, padding = 0;
  bool count_include_pad = true;  // average pooling only; PyTorch's default
};

class Pool2d : public Layer {
 public:
  Pool2d(std::string name, kernels::PoolKind kind, const Pool2dOptions& options)
      : Layer(std::move(name)), kind_(kind), options_(options) {}

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  LayerFootprint describe(const Shape& input, const PlanContext& ctx) const override;
  ReceptiveField receptive_field(const ForwardContext& ctx) const override;
  void clear_saved() override { saved_.clear(); }
  std::size_t saved_count() const override { return saved_.size(); }
  const Pool2dOptions& options() const { return options_; }

 private:
  kernels::Pool2dSpec spec_for(const Shape& x) const;

  struct Saved {
    Backend backend;
    kernels::Pool2dSpec spec;
    Tensor workspace;  // where each maximum came from (max pooling)
  };
  kernels::PoolKind kind_;
  Pool2dOptions options_;
  OpCache<kernels::Pool2dSpec, kernels::Pool2d> ops_;
  std::vector<Saved> saved_;
};

class MaxPool2d final : public Pool2d {
 public:
  MaxPool2d(std::string name, const Pool2dOptions& options) : Pool2d(std::move(name), kernels::PoolKind::max, options) {}
};

class AvgPool2d final : public Pool2d {
 public:
  AvgPool2d(std::string name, const Pool2dOptions& options)
      : Pool2d(std::move(name), kernels::PoolKind::average, options) {}
};

}  // namespace bigtrain::net
