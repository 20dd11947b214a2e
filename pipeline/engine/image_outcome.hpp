#pragma once
#include <cstdint>
#include <vector>

namespace bigtrain {

// What one training or evaluation image gave: its loss, its class probabilities and
// how many tiles it was computed from.
struct ImageOutcome {
  float loss = 0.0f;  // unscaled cross-entropy of this image
  std::vector<float> probabilities;
  std::int64_t tiles = 0;
};

}  // namespace bigtrain
