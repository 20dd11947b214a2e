#pragma once
// Frozen BatchNorm over a freshly initialised encoder is an identity map: its running
// statistics are PyTorch's defaults (mean 0, variance 1), so nothing centres the
// pre-activations, most ReLUs see the constant background of the tiles, and every
// tile's features start out nearly alike (a weakly labelled run then sits at chance
// for thousands of steps). Streaming pipelines freeze BatchNorm because a tile batch
// holds one image, whose batch statistics would normalise away the evidence; this
// gives the frozen layers the statistics of the data instead (PreciseBN: the plain
// average of batch statistics over a sample of training tiles) before the first step.
#include <cstdint>
#include <vector>

#include "kernels/core/device.hpp"
#include "net/encoder.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/dataset.hpp"

namespace bigtrain {

struct BnCalibration {
  std::int64_t images = 0;
  std::int64_t tiles = 0;
  std::int64_t batches = 0;
  double seconds = 0.0;
};

// Runs the encoder with batch statistics over the tiles of `images` training images
// (a seeded sample, the run's tiling, preprocessing and tile batch) and replaces
// every BatchNorm layer's running statistics with their average. Weights are not
// touched; the result is deterministic for a seed.
BnCalibration calibrate_batch_norm(net::Encoder& encoder, Backend backend, const Config& config,
                                   const std::vector<Sample>& train, std::int64_t images, std::uint64_t seed);

}  // namespace bigtrain
