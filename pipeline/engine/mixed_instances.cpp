#include "pipeline/engine/mixed_instances.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>

#include "kernels/core/error.hpp"
#include "kernels/cross_entropy.hpp"
#include "pipeline/common/random.hpp"

namespace bigtrain {

MixedInstanceStep::MixedInstanceStep(const ImageModel& model, const MixedInstanceOptions& options)
    : model_(model), options_(options) {
  BT_CHECK(model.encoder && model.aggregator && model.head, "mixed tile batches: encoder, aggregator and head are required");
  BT_CHECK(model.aggregator->kind() == net::AggregatorKind::instance,
           "train.mix_tiles: mixing the tiles of several images in a batch needs aggregator.kind instance (its tiles' "
           "losses need nothing of each other); the {} aggregator pools an image's tiles",
           net::aggregator_kind_name(model.aggregator->kind()));
  BT_CHECK(options.tile_batch > 0, "mixed tile batches: tile_batch must be positive, got {}", options.tile_batch);
}

MixedInstanceStep::PendingImage& MixedInstanceStep::pending(std::size_t image, int label, std::int64_t tiles,
                                                            std::shared_ptr<const ImageTiling> plan,
                                                            const Tensor& like) {
  for (PendingImage& p : images_)
    if (p.image == image) return p;
  BT_CHECK(tiles > 0, "mixed tile batches: image {} has no tiles", image);
  PendingImage p;
  p.image = image;
  p.label = label;
  p.tiles = tiles;
  p.plan = std::move(plan);
  Shape shape = like.shape();
  shape[0] = tiles;
  p.pixels = Tensor::empty(shape, DType::f32);
  p.tile_labels.assign(static_cast<std::size_t>(tiles), label);
  images_.push_back(std::move(p));
  return images_.back();
}

void MixedInstanceStep::add(std::size_t image, int label, std::int64_t tiles, std::shared_ptr<const ImageTiling> plan,
                            const Tensor& pixels, std::int64_t first_tile) {
  add_labelled(image, label, tiles, std::move(plan), pixels, first_tile,
               std::vector<int>(static_cast<std::size_t>(pixels.rank() > 0 ? pixels.dim(0) : 0), label));
}

void MixedInstanceStep::add_labelled(std::size_t image, int label, std::int64_t tiles,
                                     std::shared_ptr<const ImageTiling> plan, const Tensor& pixels,
                                     std::int64_t first_tile, const std::vector<int>& tile_labels) {
  BT_CHECK(pixels.device().is_cpu() && pixels.dtype() == DType::f32 && pixels.rank() == 4,
           "mixed tile batches: tiles arrive as host float32 [B, C, T, T], got {}", pixels.describe());
  PendingImage& p = pending(image, label, tiles, std::move(plan), pixels);
  const std::int64_t rows = pixels.dim(0);
  BT_CHECK(first_tile >= 0 && first_tile + rows <= p.tiles && p.received + rows <= p.tiles,
           "mixed tile batches: rows [{}, {}) of image {} outside its {} tiles", first_tile, first_tile + rows, image,
           p.tiles);
  BT_CHECK(pixels.shape()[1] == p.pixels.shape()[1] && pixels.shape()[2] == p.pixels.shape()[2] &&
               pixels.shape()[3] == p.pixels.shape()[3],
           "mixed tile batches: image {} changed its tile shape within the image", image);
  BT_CHECK(static_cast<std::int64_t>(tile_labels.size()) == rows, "mixed tile batches: {} labels for {} tiles",
           tile_labels.size(), rows);
  const std::int64_t classes = model_.head->out_features();
  for (int tile_label : tile_labels)
    BT_CHECK(tile_label >= 0 && tile_label < classes, "mixed tile batches: tile label {} outside the head's {} classes",
             tile_label, classes);
  p.pixels.slice_rows(first_tile, first_tile + rows).copy_from(pixels);
  std::copy(tile_labels.begin(), tile_labels.end(), p.tile_labels.begin() + first_tile);
  p.received += rows;
}

bool MixedInstanceStep::complete() const {
  return std::all_of(images_.begin(), images_.end(), [](const PendingImage& p) { return p.received == p.tiles; });
}

std::vector<std::vector<std::pair<std::size_t, std::int64_t>>> distinct_image_batches(
    const std::vector<std::int64_t>& tiles_per_image, std::int64_t tile_batch, std::uint64_t seed) {
  SplitMix64 rng(seed);
  // Each image's tiles in a seeded order, and the images in a seeded order for ties.
  std::vector<std::vector<std::int64_t>> remaining(tiles_per_image.size());
  for (std::size_t i = 0; i < tiles_per_image.size(); ++i) {
    remaining[i].resize(static_cast<std::size_t>(tiles_per_image[i]));
    std::iota(remaining[i].begin(), remaining[i].end(), std::int64_t{0});
    seeded_shuffle(remaining[i], rng);
  }
  std::vector<std::size_t> images(tiles_per_image.size());
  std::iota(images.begin(), images.end(), std::size_t{0});
  seeded_shuffle(images, rng);
  std::vector<std::vector<std::pair<std::size_t, std::int64_t>>> batches;
  for (;;) {
    // The images with the most tiles left go first, so the batches stay full as long
    // as enough images have tiles (a short tail of small batches at most).
    std::stable_sort(images.begin(), images.end(),
                     [&](std::size_t a, std::size_t b) { return remaining[a].size() > remaining[b].size(); });
    std::vector<std::pair<std::size_t, std::int64_t>> batch;
    for (std::size_t i : images) {
      if (static_cast<std::int64_t>(batch.size()) == tile_batch || remaining[i].empty()) break;
      batch.emplace_back(i, remaining[i].back());
      remaining[i].pop_back();
    }
    if (batch.empty()) break;
    batches.push_back(std::move(batch));
  }
  return batches;
}

void MixedInstanceStep::select_top_tiles() {
  const Device device = backend_device(options_.backend);
  const std::int64_t classes = model_.head->out_features();
  net::ForwardContext ctx = net::ForwardContext::inference(options_.backend);
  ctx.compute_dtype = options_.encoder_compute_dtype;
  for (PendingImage& p : images_) {
    std::vector<double> label_log_p(static_cast<std::size_t>(p.tiles));
    for (std::int64_t first = 0; first < p.tiles; first += options_.tile_batch) {
      const std::int64_t last = std::min(p.tiles, first + options_.tile_batch);
      const Tensor logits = model_.head->forward(model_.encoder->forward(p.pixels.slice_rows(first, last).to(device), ctx), ctx)
                                .to(Device::cpu());
      for (std::int64_t t = first; t < last; ++t) {
        const float* row = logits.data<float>() + (t - first) * classes;
        const double top = *std::max_element(row, row + classes);
        double sum = 0.0;
        for (std::int64_t k = 0; k < classes; ++k) sum += std::exp(static_cast<double>(row[k]) - top);
        label_log_p[static_cast<std::size_t>(t)] = row[p.tile_labels[static_cast<std::size_t>(t)]] - top - std::log(sum);
      }
    }
    std::vector<std::int64_t> order(static_cast<std::size_t>(p.tiles));
    std::iota(order.begin(), order.end(), std::int64_t{0});
    // Ties (equal probabilities) go to the lower tile index, so the choice is deterministic.
    std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
      return label_log_p[static_cast<std::size_t>(a)] > label_log_p[static_cast<std::size_t>(b)];
    });
    order.resize(static_cast<std::size_t>(std::min(p.tiles, options_.top_k)));
    std::sort(order.begin(), order.end());
    p.selected = std::move(order);
  }
}

// One tile's share of its image's loss, as the gradient of its logits, into
// `dlogits` (which holds the kernel's (softmax - onehot(label)) / batch_rows): a
// selected tile's cross-entropy with the label weighs (1/2) / selected, another
// tile's cross-entropy with the uniform distribution (1/2) / others; an image whose
// every tile is selected gives them the whole weight.
void MixedInstanceStep::train_towards_selection(const PendingImage& image, std::int64_t tile, const float* logits,
                                                float* dlogits, float loss_scale, float batch_rows) const {
  const std::int64_t classes = model_.head->out_features();
  const auto selected = static_cast<std::int64_t>(image.selected.size());
  const std::int64_t others = image.tiles - selected;
  const bool is_selected = std::binary_search(image.selected.begin(), image.selected.end(), tile);
  const float share = others == 0 ? 1.0f : 0.5f;
  const float weight =
      loss_scale * share / static_cast<float>(is_selected ? selected : others);
  if (is_selected) {
    // The kernel's gradient of the batch mean: times the batch's rows gives this tile's own.
    for (std::int64_t k = 0; k < classes; ++k) dlogits[k] *= weight * batch_rows;
    return;
  }
  // d/dz of -sum_k (1/C) log softmax(z)_k = softmax(z) - 1/C.
  const float top = *std::max_element(logits, logits + classes);
  double sum = 0.0;
  for (std::int64_t k = 0; k < classes; ++k) sum += std::exp(static_cast<double>(logits[k] - top));
  for (std::int64_t k = 0; k < classes; ++k)
    dlogits[k] = weight * static_cast<float>(std::exp(static_cast<double>(logits[k] - top)) / sum -
                                             1.0 / static_cast<double>(classes));
}

std::vector<std::vector<std::pair<std::size_t, std::int64_t>>> shuffled_batches(
    const std::vector<std::int64_t>& tiles_per_image, std::int64_t tile_batch, std::uint64_t seed) {
  std::vector<std::pair<std::size_t, std::int64_t>> order;
  for (std::size_t i = 0; i < tiles_per_image.size(); ++i)
    for (std::int64_t t = 0; t < tiles_per_image[i]; ++t) order.emplace_back(i, t);
  SplitMix64 rng(seed);
  seeded_shuffle(order, rng);
  std::vector<std::vector<std::pair<std::size_t, std::int64_t>>> batches;
  for (std::size_t first = 0; first < order.size(); first += static_cast<std::size_t>(tile_batch))
    batches.emplace_back(order.begin() + static_cast<std::ptrdiff_t>(first),
                         order.begin() + static_cast<std::ptrdiff_t>(
                                             std::min(order.size(), first + static_cast<std::size_t>(tile_batch))));
  return batches;
}

std::vector<MixedImageResult> MixedInstanceStep::train(float loss_scale, std::uint64_t shuffle_seed,
                                                       const std::function<void()>& after_batch) {
  BT_CHECK(complete(), "mixed tile batches: the step trains before every image's tiles arrived");
  BT_CHECK(!images_.empty(), "mixed tile batches: no tiles to train");
  // Tiles of different sizes (tiler.mode resize next to tiles) cannot share a batch.
  for (const PendingImage& p : images_)
    BT_CHECK(p.pixels.shape() == Shape({p.tiles, images_.front().pixels.dim(1), images_.front().pixels.dim(2),
                                        images_.front().pixels.dim(3)}),
             "mixed tile batches: image {} has tiles {}, image {} {}", p.image, p.pixels.describe(),
             images_.front().image, images_.front().pixels.describe());
  std::vector<std::int64_t> tiles_per_image;
  for (const PendingImage& p : images_) tiles_per_image.push_back(p.tiles);
  const auto batches = options_.distinct_images
                           ? distinct_image_batches(tiles_per_image, options_.tile_batch, shuffle_seed)
                           : shuffled_batches(tiles_per_image, options_.tile_batch, shuffle_seed);
  if (options_.top_k > 0) select_top_tiles();
  // A batch stepped on its own: every image's weights sum to one, so over the step
  // they sum to the image count; spread over the batches, a batch weighs one on average.
  const float top_k_scale =
      after_batch ? loss_scale * static_cast<float>(images_.size()) / static_cast<float>(batches.size()) : loss_scale;

  const Device device = backend_device(options_.backend);
  const std::int64_t classes = model_.head->out_features();
  std::vector<Tensor> logits(images_.size());
  for (std::size_t i = 0; i < images_.size(); ++i) logits[i] = Tensor::empty({images_[i].tiles, classes});
  const Shape tile_shape{1, images_.front().pixels.dim(1), images_.front().pixels.dim(2), images_.front().pixels.dim(3)};
  const auto tile_floats = static_cast<std::size_t>(shape_numel(tile_shape));

  net::ForwardContext encoder_ctx;
  encoder_ctx.backend = options_.backend;
  encoder_ctx.training = true;
  encoder_ctx.keep_activations = options_.train_encoder;
  encoder_ctx.freeze_bn = options_.freeze_bn;
  encoder_ctx.update_bn_running_stats = !options_.freeze_bn;
  encoder_ctx.compute_dtype = options_.encoder_compute_dtype;
  net::ForwardContext head_ctx;
  head_ctx.backend = options_.backend;
  head_ctx.training = true;
  head_ctx.keep_activations = true;

  for (const auto& batch : batches) {
    const std::size_t count = batch.size();
    const auto rows = static_cast<std::int64_t>(count);
    Tensor x = Tensor::empty({rows, tile_shape[1], tile_shape[2], tile_shape[3]});
    Tensor targets = Tensor::empty({rows}, DType::i32);
    for (std::size_t r = 0; r < count; ++r) {
      const auto [i, t] = batch[r];
      std::memcpy(x.data<float>() + r * tile_floats, images_[i].pixels.data<float>() + t * tile_floats,
                  tile_floats * sizeof(float));
      targets.data<std::int32_t>()[r] = images_[i].tile_labels[static_cast<std::size_t>(t)];
    }
    Tensor features = model_.encoder->forward(x.to(device), encoder_ctx);
    Tensor batch_logits = model_.head->forward(features, head_ctx);
    Tensor dlogits = Tensor::empty(batch_logits.shape(), DType::f32, device);
    kernels::CrossEntropyOptions ce;
    ce.label_smoothing = options_.label_smoothing;
    kernels::cross_entropy(options_.backend, batch_logits, targets.to(device), nullptr, ce, dlogits);
    // The kernel averages over the batch's rows; a tile's share is instead
    // 1 / its image's tile count, times loss_scale.
    Tensor host_logits = batch_logits.to(Device::cpu());
    Tensor host_dlogits = dlogits.to(Device::cpu());
    for (std::size_t r = 0; r < count; ++r) {
      const auto [i, t] = batch[r];
      std::memcpy(logits[i].data<float>() + t * classes, host_logits.data<float>() + r * classes,
                  static_cast<std::size_t>(classes) * sizeof(float));
      float* row = host_dlogits.data<float>() + r * classes;
      if (options_.top_k == 0) {
        // The kernel's gradient is already the batch's mean.
        const float weight = after_batch ? loss_scale
                                         : loss_scale * static_cast<float>(rows) / static_cast<float>(images_[i].tiles);
        for (std::int64_t k = 0; k < classes; ++k) row[k] *= weight;
      } else {
        train_towards_selection(images_[i], t, host_logits.data<float>() + r * classes, row, top_k_scale,
                                static_cast<float>(rows));
      }
    }
    Tensor dfeatures = model_.head->backward(host_dlogits.to(device));
    if (options_.train_encoder) model_.encoder->backward(dfeatures);
    if (after_batch) after_batch();
  }

  std::vector<MixedImageResult> results;
  results.reserve(images_.size());
  for (std::size_t i = 0; i < images_.size(); ++i) {
    MixedImageResult result;
    result.image = images_[i].image;
    result.label = images_[i].label;
    result.plan = images_[i].plan;
    result.vote = instance_vote(logits[i], images_[i].label, options_.label_smoothing);
    for (std::int64_t t = 0; t < images_[i].tiles; ++t) {
      const int tile_label = images_[i].tile_labels[static_cast<std::size_t>(t)];
      result.tile_loss -= result.vote.tile_log_probabilities[static_cast<std::size_t>(t * classes + tile_label)];
      const float* row = logits[i].data<float>() + t * classes;
      if (std::max_element(row, row + classes) - row == tile_label) ++result.tiles_correct;
    }
    result.tile_loss /= static_cast<double>(images_[i].tiles);
    result.tile_weights = result.vote.predicted_class_shares();
    result.selected = images_[i].selected;
    results.push_back(std::move(result));
  }
  images_.clear();
  return results;
}

}  // namespace bigtrain
