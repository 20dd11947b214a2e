#pragma once
// SimCLR (Chen, Kornblith, Norouzi and Hinton, ICML 2020) as self-supervised
// pretraining of the encoder on the training images' tiles, labels unused: two
// random views of every tile (a random resized crop, contrast, brightness and noise)
// pass the encoder and a two-layer projection, and NT-Xent trains each view to pick
// its twin out of the batch's other views. Rotation prediction learns only from
// tiles with an upright shape (13% of the seed-scale set's tiles, docs/learning.md);
// here every tile, clutter included, is a training example, and the features that
// tell two tiles apart after cropping and relighting are their shapes.
//
// Batches are tile_batch tiles drawn across pretrain.images_per_step images (2 x
// tile_batch views a forward, BatchNorm with batch statistics), an optimizer step
// after each. The projection is dropped afterwards, as SimCLR does.
#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/core/device.hpp"
#include "kernels/core/tensor.hpp"
#include "net/encoder.hpp"
#include "pipeline/common/random.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/dataset.hpp"
#include "pipeline/train/pretext.hpp"

namespace bigtrain {

struct NtXentResult {
  double loss = 0.0;      // mean over the 2N views
  double accuracy = 0.0;  // share of views whose most similar other view is their twin (chance 1 / (2N - 1))
};

// NT-Xent (normalised temperature-scaled cross-entropy) over host float32 projections
// [2N, d], rows i and i + N twins; cosine similarity over `temperature`. With
// `dprojections` (host [2N, d]) also the gradient of the mean loss.
NtXentResult nt_xent(const Tensor& projections, double temperature, Tensor* dprojections);

// One random view of a host tile [C, T, T] into `view` (the same shape): a crop of
// 35-100% of the area (aspect 3/4..4/3) resized back to T x T, contrast x0.6..1.4,
// brightness +-0.4 and Gaussian noise of 0.1 (in the normalised pixels' units).
void contrastive_view(const float* tile, std::int64_t channels, std::int64_t size, SplitMix64& rng, float* view);

// Trains `encoder` for config.pretrain.epochs (> 0) on `train`'s tiles; PretextEpoch's
// tile_accuracy is NT-Xent's accuracy. Throws bigtrain::Error on a non-finite loss,
// and when stop_requested() turns true between optimizer steps.
std::vector<PretextEpoch> pretrain_by_contrast(const Config& config, const std::vector<Sample>& train,
                                               net::Encoder& encoder, Backend backend, std::uint64_t seed,
                                               const std::function<bool()>& stop_requested);

}  // namespace bigtrain
