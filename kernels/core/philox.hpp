#pragma once
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011): a counter-based RNG. A draw is a pure function of (key, counter), so
// any element's random number is computed directly from its index, with no state
// to carry between calls, threads or devices. That is what lets the CPU and CUDA
// backends draw the same dropout mask and pass 2 of training recompute pass 1's.
//
// Header-only and free of fmt/spdlog, so nvcc compiles it into .cu kernels.
#include <cstdint>

#if defined(__CUDACC__)
#define BT_HOST_DEVICE __host__ __device__
#else
#define BT_HOST_DEVICE
#endif

namespace bigtrain::philox {

struct Counter {
  std::uint32_t v[4];
};
struct Key {
  std::uint32_t v[2];
};

// Multipliers and Weyl key increments from the paper (Random123's defaults).
inline constexpr std::uint32_t kMultiplier0 = 0xD2511F53u;
inline constexpr std::uint32_t kMultiplier1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kWeyl0 = 0x9E3779B9u;
inline constexpr std::uint32_t kWeyl1 = 0xBB67AE85u;

BT_HOST_DEVICE inline Counter single_round(Counter c, Key k) {
  const std::uint64_t product0 = static_cast<std::uint64_t>(kMultiplier0) * c.v[0];
  const std::uint64_t product1 = static_cast<std::uint64_t>(kMultiplier1) * c.v[2];
  Counter out;
  out.v[0] = static_cast<std::uint32_t>(product1 >> 32) ^ c.v[1] ^ k.v[0];
  out.v[1] = static_cast<std::uint32_t>(product1);
  out.v[2] = static_cast<std::uint32_t>(product0 >> 32) ^ c.v[3] ^ k.v[1];
  out.v[3] = static_cast<std::uint32_t>(product0);
  return out;
}

// Ten rounds, the key bumped between rounds (nine bumps), as Random123's philox4x32_R(10, ...).
BT_HOST_DEVICE inline Counter philox4x32_10(Counter counter, Key key) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key.v[0] += kWeyl0;
      key.v[1] += kWeyl1;
    }
    counter = single_round(counter, key);
  }
  return counter;
}

// 24 random bits -> a float in [0, 1) on the grid k / 2^24: every value is exact in
// float, so `u >= p` is decided identically on every device and compiler.
BT_HOST_DEVICE inline float to_unit_float(std::uint32_t bits) {
  return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f);
}

BT_HOST_DEVICE inline Key key_from_seed(std::uint64_t seed) {
  return Key{{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)}};
}

// The counter block holding stream position `index`: one Philox call yields four
// consecutive positions (index / 4), so a vectorised loop or a CUDA thread handling
// four elements pays one call per four draws.
BT_HOST_DEVICE inline Counter block_counter(std::uint64_t index) {
  const std::uint64_t block = index >> 2;
  return Counter{{static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32), 0u, 0u}};
}

// The uniform float in [0, 1) at position `index` of the stream named by `seed`.
// Defined as lane (index % 4) of philox4x32_10(block_counter(index), key_from_seed(seed)).
BT_HOST_DEVICE inline float uniform(std::uint64_t seed, std::uint64_t index) {
  const Counter block = philox4x32_10(block_counter(index), key_from_seed(seed));
  return to_unit_float(block.v[index & 3u]);
}

}  // namespace bigtrain::philox
