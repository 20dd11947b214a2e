#pragma once
// [N,C,H,W] -> [N,C]: torchvision's avgpool + flatten, the encoder's last layer;
// its output is the tile feature the aggregators consume.
#include <vector>

#include "net/layer.hpp"

namespace bigtrain::net {

class GlobalAvgPool final : public Layer {
 public:
  explicit GlobalAvgPool(std::string name = {}) : Layer(std::move(name)) {}

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  LayerFootprint describe(const Shape& input, const PlanContext& ctx) const override;
  void clear_saved() override { saved_.clear(); }
  std::size_t saved_count() const override { return saved_.size(); }

 private:
  struct Saved {
    Backend backend;
    Shape input_shape;
    // The input's layout: the gradient is written in it, so the layers below
    // receive it as their own activations are (no reorder at the encoder's edge).
    Layout input_layout = Layout::plain;
  };
  std::vector<Saved> saved_;
};

}  // namespace bigtrain::net
