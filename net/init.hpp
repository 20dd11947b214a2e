#pragma once
// Weight initialisation as torchvision does it, from a seeded generator whose
// output is the same with every standard library: std::mt19937_64 is specified
// bit for bit by the standard, but std::normal_distribution and
// std::uniform_real_distribution are not, so the distributions are written here.
//
// Every parameter draws from its own stream, seeded by (model seed, parameter
// name): a parameter's initial value does not depend on how many parameters were
// built before it, so re-initialising one (a new head) or adding a layer leaves
// the others unchanged.
#include <cstdint>
#include <optional>
#include <random>
#include <string_view>

#include "kernels/core/tensor.hpp"

namespace bigtrain::net {

// The seed a layer initialises its parameters from; nullopt leaves them zero, for
// a model whose weights are loaded from a checkpoint right away (inference), which
// saves drawing ~25M normal numbers for a ResNet-50.
using InitSeed = std::optional<std::uint64_t>;

class InitRandom {
 public:
  explicit InitRandom(std::uint64_t seed) : engine_(seed) {}
  InitRandom(std::uint64_t seed, std::string_view stream);
  // Uniform in [lo, hi): 53 random bits scaled, as std::generate_canonical would but portably.
  double uniform(double lo, double hi);
  // Standard normal by the Box-Muller transform (both values used, the second cached).
  double normal();

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// A 64-bit mix of a seed and a name (FNV-1a over the name, splitmix64 finaliser).
std::uint64_t mix_seed(std::uint64_t seed, std::string_view stream);

// PyTorch's fans of a weight [out, in/groups, kh, kw] or [out, in].
std::int64_t fan_in(const Tensor& weight);
std::int64_t fan_out(const Tensor& weight);

// nn.init.kaiming_normal_(w, mode='fan_out', nonlinearity='relu'): N(0, 2 / fan_out).
// torchvision's ResNet initialises every convolution so.
void kaiming_normal_fan_out(Tensor& weight, InitRandom& random);
// nn.Linear / nn.Conv2d default: kaiming_uniform_(a=sqrt(5)) = U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
void default_weight_uniform(Tensor& weight, InitRandom& random);
// Their default bias: U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with the weight's fan_in.
void default_bias_uniform(Tensor& bias, std::int64_t weight_fan_in, InitRandom& random);

}  // namespace bigtrain::net
