#pragma once
// nn.ReLU. In place (inplace=True, as torchvision's ResNet) overwrites its input,
// which saves one activation per ReLU; only safe where nothing else still reads
// the input, which is so after a BatchNorm or a residual add (they do not keep
// their outputs). Backward uses the saved output.
#include <vector>

#include "net/layer.hpp"

namespace bigtrain::net {

class ReLU final : public Layer {
 public:
  explicit ReLU(std::string name = {}, bool inplace = false) : Layer(std::move(name)), inplace_(inplace) {}

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  // Records `y` as this ReLU's output when an op ran it fused (the end of a residual
  // block), so that backward masks the gradient with it as after forward.
  void keep_fused_output(const Tensor& y, const ForwardContext& ctx);
  LayerFootprint describe(const Shape& input, const PlanContext& ctx) const override;
  ReceptiveField receptive_field(const ForwardContext&) const override { return ReceptiveField::identity(); }
  void clear_saved() override { saved_.clear(); }
  std::size_t saved_count() const override { return saved_.size(); }

 private:
  struct Saved {
    Backend backend;
    Tensor y;
  };
  bool inplace_;
  std::vector<Saved> saved_;
};

}  // namespace bigtrain::net
