#include "net/init.hpp"

#include <cmath>
#include <numbers>
#include <vector>

#include "kernels/core/error.hpp"

namespace bigtrain::net {
namespace {

std::uint64_t splitmix64_finalise(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Fills a tensor (host or device) from values computed on the host.
template <typename Draw>
void fill_host(Tensor& tensor, Draw&& draw) {
  BT_CHECK(tensor.dtype() == DType::f32, "initialisation expects a float32 tensor, got {}", tensor.describe());
  std::vector<float> values(static_cast<std::size_t>(tensor.numel()));
  for (float& value : values) value = static_cast<float>(draw());
  Tensor host = Tensor::from_vector(tensor.shape(), values);
  tensor.copy_from(host);
}

}  // namespace

std::uint64_t mix_seed(std::uint64_t seed, std::string_view stream) {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  for (char c : stream) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return splitmix64_finalise(seed + 0x9E3779B97F4A7C15ull * (hash | 1));
}

InitRandom::InitRandom(std::uint64_t seed, std::string_view stream) : engine_(mix_seed(seed, stream)) {}

double InitRandom::uniform(double lo, double hi) {
  const double unit = static_cast<double>(engine_() >> 11) * 0x1.0p-53;  // [0, 1)
  return lo + (hi - lo) * unit;
}

double InitRandom::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double u1 = 1.0 - uniform(0.0, 1.0);  // (0, 1]: log stays finite
  const double u2 = uniform(0.0, 1.0);
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * std::numbers::pi * u2;
  spare_ = radius * std::sin(angle);
  has_spare_ = true;
  return radius * std::cos(angle);
}

std::int64_t fan_in(const Tensor& weight) {
  BT_CHECK(weight.rank() >= 2, "fan_in of {}: needs rank >= 2", weight.describe());
  return weight.numel() / weight.dim(0);
}

std::int64_t fan_out(const Tensor& weight) {
  BT_CHECK(weight.rank() >= 2, "fan_out of {}: needs rank >= 2", weight.describe());
  return weight.numel() / weight.dim(1);
}

void kaiming_normal_fan_out(Tensor& weight, InitRandom& random) {
  const double std = std::sqrt(2.0 / static_cast<double>(fan_out(weight)));
  fill_host(weight, [&] { return std * random.normal(); });
}

void default_weight_uniform(Tensor& weight, InitRandom& random) {
  // gain(leaky_relu, a=sqrt(5)) * sqrt(3 / fan_in) = sqrt(2 / 6) * sqrt(3 / fan_in) = 1 / sqrt(fan_in)
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in(weight)));
  fill_host(weight, [&] { return random.uniform(-bound, bound); });
}

void default_bias_uniform(Tensor& bias, std::int64_t weight_fan_in, InitRandom& random) {
  const double bound = weight_fan_in > 0 ? 1.0 / std::sqrt(static_cast<double>(weight_fan_in)) : 0.0;
  fill_host(bias, [&] { return random.uniform(-bound, bound); });
}

}  // namespace bigtrain::net
