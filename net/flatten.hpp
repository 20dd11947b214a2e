#pragma once
// torch.flatten(x, 1): [N, ...] -> [N, prod(...)], a view (no copy).
#include <vector>

#include "net/layer.hpp"

namespace bigtrain::net {

class Flatten final : public Layer {
 public:
  explicit Flatten(std::string name = {}) : Layer(std::move(name)) {}

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  LayerFootprint describe(const Shape& input, const PlanContext& ctx) const override;
  void clear_saved() override { saved_.clear(); }
  std::size_t saved_count() const override { return saved_.size(); }

 private:
  std::vector<Shape> saved_;  // input shapes
};

}  // namespace bigtrain::net
