#pragma once
// nn.Linear: state_dict entries `<name>.weight` [out, in] and `<name>.bias` [out].
#include <cstdint>
#include <vector>

#include "kernels/linear.hpp"
#include "net/init.hpp"
#include "net/layer.hpp"
#include "net/op_cache.hpp"

namespace bigtrain::net {

class Linear final : public Layer {
 public:
  // PyTorch's default initialisation from `seed` (see reset_parameters); zeros for nullopt.
  Linear(std::string name, std::int64_t in_features, std::int64_t out_features, InitSeed seed,
         bool bias = true);

  Tensor forward(const Tensor& x, const ForwardContext& ctx) override;
  Tensor backward(const Tensor& dy) override;
  LayerFootprint describe(const Shape& input, const PlanContext& ctx) const override;
  void collect_state(StateRefs& refs) override;
  void clear_saved() override { saved_.clear(); }
  std::size_t saved_count() const override { return saved_.size(); }

  // kaiming_uniform_(a=sqrt(5)) weight, U(+-1/sqrt(in)) bias, on the parameters' device.
  void reset_parameters(std::uint64_t seed);
  std::int64_t in_features() const { return in_features_; }
  std::int64_t out_features() const { return out_features_; }
  Parameter& weight() { return weight_; }
  Parameter* bias() { return has_bias_ ? &bias_ : nullptr; }

 private:
  struct Saved {
    Backend backend;
    kernels::LinearSpec spec;
    Tensor x;
  };
  std::int64_t in_features_, out_features_;
  bool has_bias_;
  Parameter weight_, bias_;
  OpCache<kernels::LinearSpec, kernels::Linear> ops_;
  std::vector<Saved> saved_;
};

}  // namespace bigtrain::net
