#pragma once
// What the two pretexts (rotation prediction, pipeline/train/pretext.hpp; SimCLR,
// pipeline/train/contrastive.hpp) share, so that a key of the pretrain section means
// the same to both: their batch, rate and pool of images, the optimizer with its
// cosine schedule counted in groups of images, each epoch's seeded image order, the
// preprocessing of their tiles, and the error an interrupted pretraining ends with.
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/core/device.hpp"
#include "net/optimizer.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/preprocess.hpp"
#include "pipeline/data/tile_stream.hpp"

namespace bigtrain {

struct PretextPlan {
  std::int64_t images = 0;           // training images
  std::int64_t images_per_step = 1;  // pretrain.images_per_step, else train's
  std::int64_t tile_batch = 1;       // pretrain.tile_batch, else train's
  double lr = 0.0;                   // pretrain.lr, else train's
  std::int64_t groups_per_epoch = 1;  // groups of images_per_step images: the schedule's clock
};

PretextPlan plan_pretext(const Config& config, std::size_t training_images);

// train.optimizer over `params` at the plan's rate, cosine to 0 over the pretraining's
// groups after train.warmup_steps; norms and biases are not decayed.
std::unique_ptr<net::Optimizer> make_pretext_optimizer(const Config& config, const PretextPlan& plan,
                                                       const std::vector<net::Parameter*>& params, Backend backend);

// Every training image once, in the order `order_seed` shuffles them to.
std::vector<StreamJob> pretext_epoch_jobs(std::size_t training_images, std::uint64_t order_seed);

// The training preprocessing (augmentation on), normalised as pretrain.normalize says.
Preprocessing pretext_preprocessing(const Config& config, int channels);

[[noreturn]] void throw_pretext_interrupted(std::int64_t epoch, std::int64_t epochs);

}  // namespace bigtrain
