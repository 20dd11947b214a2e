#pragma once
// The instance aggregator with train.mix_tiles: the tiles of every image of one
// optimizer step are dealt into batches that hold at most one tile of each image
// (tile_batch tiles, or as many as the step has images), so each batch's BatchNorm
// statistics come from many images, as in ordinary image classification. Unmixed,
// a batch is one image's tiles, and batch statistics then normalise that image's
// own evidence away; shuffled freely, a tile shares its batch with ~1 tile of its
// own image, and the network fitted every training image's label through the batch
// statistics (training accuracy 1.00, the same weights with running statistics
// 0.07 on those images; docs/learning.md).
//
// Every tile is trained with its image's label; an image's tiles share its loss
// equally (1 / its tile count) and every image weighs the same in the step, as in
// TwoPassStep::train_instances_batch, so with frozen BatchNorm the gradients are the
// unmixed step's (tests/pipeline/mixed_instances_test.cpp).
//
// Memory: the step's tiles' pixels on the host (images_per_step x tiles an image;
// tiler.max_tiles_per_image or the background filter bound it), one batch's
// activations, and the tiles' logits.
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/core/tensor.hpp"
#include "pipeline/data/image_tiling.hpp"
#include "pipeline/engine/instance_vote.hpp"
#include "pipeline/engine/two_pass.hpp"

namespace bigtrain {

struct MixedInstanceOptions {
  Backend backend = Backend::cpu;
  bool freeze_bn = false;
  float label_smoothing = 0.0f;
  DType encoder_compute_dtype = DType::f32;
  std::int64_t tile_batch = 16;
  // true: no batch holds two tiles of one image (distinct_image_batches), for image
  // labels. false: the step's tiles shuffled freely into batches of tile_batch, for
  // labels of the tiles' own (the rotation pretext), where a small step would
  // otherwise cap the batch at its image count.
  bool distinct_images = true;
  // train.instance_top_k: 0 trains every tile with its image's label. K > 0 first
  // scores every tile without gradients (inference mode) and trains only the K with
  // the highest probability of the label with it, half the image's weight, and the
  // others towards the uniform distribution ("shows no class"), the other half: the
  // multi-class form of Campanella et al.'s top-k MIL, with CLAM's idea that the
  // unlikely tiles are negatives. The mean-log-probability vote is unchanged: tiles
  // trained to uniform add the same to every class.
  std::int64_t top_k = 0;
  // false (train.encoder_lr_scale: 0, a linear probe): the encoder's weights never
  // move, so its activations are not kept and its backward, two thirds of a step's
  // work, is skipped; its parameters get no gradient. BatchNorm's statistics still
  // follow the data unless frozen.
  bool train_encoder = true;
};

struct MixedImageResult {
  std::size_t image = 0;  // as given to add()
  int label = 0;
  std::shared_ptr<const ImageTiling> plan;
  InstanceVote vote;  // from the training forward's logits
  // The tiles against their own labels (the image's, or those given to add_labelled).
  double tile_loss = 0.0;  // mean cross-entropy against the image's label
  std::vector<std::int64_t> selected;  // top_k > 0: the tiles trained with the label
  std::int64_t tiles_correct = 0;
  Tensor tile_weights;  // host [tiles]: each tile's probability of the voted class, normalised
};

// The batches of one step as (image, tile) pairs: every tile of every image once, no
// image twice in a batch, at most tile_batch a batch, full while at least tile_batch
// images have tiles left; seeded.
std::vector<std::vector<std::pair<std::size_t, std::int64_t>>> distinct_image_batches(
    const std::vector<std::int64_t>& tiles_per_image, std::int64_t tile_batch, std::uint64_t seed);

// Every tile once, shuffled (seeded), cut into batches of tile_batch.
std::vector<std::vector<std::pair<std::size_t, std::int64_t>>> shuffled_batches(
    const std::vector<std::int64_t>& tiles_per_image, std::int64_t tile_batch, std::uint64_t seed);

class MixedInstanceStep {
 public:
  MixedInstanceStep(const ImageModel& model, const MixedInstanceOptions& options);

  // One tile batch of an image: host pixels [B, C, T, T], rows [first_tile,
  // first_tile + B) of the image's `tiles`.
  void add(std::size_t image, int label, std::int64_t tiles, std::shared_ptr<const ImageTiling> plan,
           const Tensor& pixels, std::int64_t first_tile);
  // The same with a label for each tile (a pretext task's, pipeline/train/pretext.hpp);
  // `label` is then the image's, for its vote.
  void add_labelled(std::size_t image, int label, std::int64_t tiles, std::shared_ptr<const ImageTiling> plan,
                    const Tensor& pixels, std::int64_t first_tile, const std::vector<int>& tile_labels);
  std::size_t images() const { return images_.size(); }
  // Every added image has all its tiles.
  bool complete() const;

  // Forward and backward of every added tile in batches of tile_batch, in an order
  // drawn from shuffle_seed; each image's loss gradient is multiplied by loss_scale.
  // Returns each image's vote in the order the images were added, and forgets them.
  //
  // With after_batch (train.step_every_batch) it is called after each batch's
  // backward, to take an optimizer step, and a batch's loss is its own: the mean
  // over its tiles (top_k: the images' weights rescaled so that a batch weighs one
  // on average), times loss_scale.
  std::vector<MixedImageResult> train(float loss_scale, std::uint64_t shuffle_seed,
                                      const std::function<void()>& after_batch = {});

 private:
  struct PendingImage {
    std::size_t image = 0;
    int label = 0;
    std::int64_t tiles = 0, received = 0;
    std::shared_ptr<const ImageTiling> plan;
    Tensor pixels;  // host [tiles, C, T, T]
    std::vector<int> tile_labels;
    std::vector<std::int64_t> selected;  // top_k: ascending tile indices
  };
  PendingImage& pending(std::size_t image, int label, std::int64_t tiles, std::shared_ptr<const ImageTiling> plan,
                        const Tensor& like);
  // top_k: scores every tile (inference mode) and fills each image's `selected`.
  void select_top_tiles();
  // top_k: overwrites one tile's row of the batch's cross-entropy gradient with its
  // share of the image's loss (see MixedInstanceOptions::top_k).
  void train_towards_selection(const PendingImage& image, std::int64_t tile, const float* logits, float* dlogits,
                               float loss_scale, float batch_rows) const;

  ImageModel model_;
  MixedInstanceOptions options_;
  std::vector<PendingImage> images_;
};

}  // namespace bigtrain
