#pragma once
// Rotation prediction (Gidaris, Singh and Komodakis, ICLR 2018) as self-supervised
// pretraining of the encoder on the training images' tiles, labels unused: each
// tile is turned by k quarter turns (k drawn from the seed) and a 4-way head of
// its own learns k. Textures, illumination gradients and random strokes look the
// same at every turn; upright objects (digits, text, polarised cells) do not, so
// the only way to beat chance is to learn their shapes, which is what the weakly
// labelled task needs first (docs/learning.md). Batches mix the tiles of
// pretrain.images_per_step images with BatchNorm batch statistics
// (pipeline/engine/mixed_instances.hpp).
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/core/device.hpp"
#include "net/encoder.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/dataset.hpp"

namespace bigtrain {

struct PretextEpoch {
  std::int64_t epoch = 0;
  double loss = 0.0;           // mean cross-entropy over the tiles (ln 4 = 1.386 at chance)
  double tile_accuracy = 0.0;  // 0.25 at chance
  std::int64_t tiles = 0;
  double seconds = 0.0;
};

// Trains `encoder` for config.pretrain.epochs (> 0) on `train`'s tiles. Throws
// bigtrain::Error on a non-finite loss, and when stop_requested() turns true
// between optimizer steps (nothing of the pretraining is kept).
std::vector<PretextEpoch> pretrain_by_rotation(const Config& config, const std::vector<Sample>& train,
                                               net::Encoder& encoder, Backend backend, std::uint64_t seed,
                                               const std::function<bool()>& stop_requested);

// Turns a square host tile [C, T, T] by `turns` quarter turns, in place.
void rotate_tile_quarter_turns(float* tile, std::int64_t channels, std::int64_t size, int turns);

std::string pretext_csv(const std::vector<PretextEpoch>& epochs);

}  // namespace bigtrain
