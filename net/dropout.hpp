#pragma once
// nn.Dropout (inverted: kept values scaled by 1/(1-p)); identity unless training.
// The mask is a pure function of (seed, offset, element): the layer's seed is the
// context's dropout_seed mixed with the layer's name, so two dropout layers draw
// different masks while pass 2 of the tile trainer redraws pass 1's exactly.
#include <cstdint>
#include <vector>

#include "net/layer.hpp"

namespace bigtrain::net {

class Dropout final : public Layer {
 public:
  Dropout(std::string name, float p);

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  LayerFootprint describe(const Shape& input, const PlanContext& ctx) const override;
  // The identity outside training; a training mask is drawn per element of the
  // tensor the layer sees, so a tile would not draw the whole image's mask.
  ReceptiveField receptive_field(const ForwardContext& ctx) const override;
  void clear_saved() override { saved_.clear(); }
  std::size_t saved_count() const override { return saved_.size(); }
  float p() const { return p_; }

 private:
  struct Saved {
    Backend backend;
    Tensor mask;  // u8; undefined when the forward was the identity
  };
  float p_;
  std::vector<Saved> saved_;
};

}  // namespace bigtrain::net
