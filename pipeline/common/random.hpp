#pragma once
// The pipeline's random numbers: splitmix64, whose whole state is one integer, so a
// checkpoint saves it exactly and a resumed run draws what the uninterrupted run
// would have drawn. std::shuffle and std::*_distribution are avoided on purpose:
// their results differ between standard libraries, and runs must repeat anywhere.
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace bigtrain {

class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state = 0) : state_(state) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Uniform integer in [0, n) without modulo bias.
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t limit = ~std::uint64_t{0} - (~std::uint64_t{0} % n);
    std::uint64_t x;
    do x = next(); while (x >= limit);
    return x % n;
  }
  // Standard normal by Box-Muller (one value per call: no hidden cached second
  // value, so the state stays one integer).
  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  std::uint64_t state() const { return state_; }
  void set_state(std::uint64_t state) { state_ = state; }

 private:
  std::uint64_t state_;
};

// A stream for one purpose derived from a run seed and labels (epoch, image,
// tile...), so each draw depends only on what it is for, never on draw order.
inline std::uint64_t mix_seed(std::uint64_t seed, std::uint64_t a, std::uint64_t b = 0, std::uint64_t c = 0) {
  SplitMix64 g(seed);
  std::uint64_t h = g.next();
  for (std::uint64_t v : {a, b, c}) {
    SplitMix64 step(h ^ (v + 0x632BE59BD9B4E019ull));
    h = step.next();
  }
  return h;
}

template <typename T>
void seeded_shuffle(std::vector<T>& items, SplitMix64& rng) {
  for (std::size_t i = items.size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(rng.below(i));
    std::swap(items[i - 1], items[j]);
  }
}

}  // namespace bigtrain
