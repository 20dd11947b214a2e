#include "pipeline/engine/two_pass.hpp"

#include <algorithm>
#include <cmath>

#include "kernels/core/error.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/elementwise.hpp"
#include "pipeline/engine/instance_vote.hpp"

namespace bigtrain {

std::vector<net::Parameter*> ImageModel::parameters() const {
  std::vector<net::Parameter*> all = encoder->parameters();
  for (net::Parameter* p : aggregator->parameters()) all.push_back(p);
  for (net::Parameter* p : head->parameters()) all.push_back(p);
  return all;
}

void ImageModel::zero_grad() const {
  for (net::Parameter* p : parameters()) p->zero_grad();
}

TwoPassStep::TwoPassStep(const ImageModel& model, const TwoPassOptions& options) : model_(model), options_(options) {
  BT_CHECK(model.encoder && model.aggregator && model.head, "two-pass step: encoder, aggregator and head are required");
  instance_ = model.aggregator->kind() == net::AggregatorKind::instance;
  BT_CHECK(options.top_tiles == 0 || model.aggregator->kind() == net::AggregatorKind::attention || instance_,
           "two-pass step: aggregator.top_tiles ranks tiles by attention (or the instance vote by each tile's "
           "probability of the label); the {} aggregator has neither",
           net::aggregator_kind_name(model.aggregator->kind()));
  BT_CHECK(options.top_tiles >= 0, "two-pass step: top_tiles must not be negative, got {}", options.top_tiles);
  BT_CHECK(options.instance_k == 0 || model.aggregator->kind() == net::AggregatorKind::attention,
           "two-pass step: train.instance_loss picks tiles by attention; the {} aggregator has none",
           net::aggregator_kind_name(model.aggregator->kind()));
  BT_CHECK(model.encoder->feature_dim() == model.aggregator->features() &&
               model.aggregator->features() == model.head->in_features(),
           "two-pass step: the encoder emits {} features, the aggregator takes {}, the head {}",
           model.encoder->feature_dim(), model.aggregator->features(), model.head->in_features());
}

net::ForwardContext TwoPassStep::encoder_context(bool keep_activations, bool update_running_stats) const {
  net::ForwardContext ctx;
  ctx.backend = options_.backend;
  ctx.training = true;
  ctx.keep_activations = keep_activations;
  ctx.freeze_bn = options_.freeze_bn;
  ctx.update_bn_running_stats = update_running_stats && !options_.freeze_bn;
  ctx.compute_dtype = options_.encoder_compute_dtype;
  ctx.fuse_conv_bn = options_.fuse_conv_bn;
  ctx.fuse_narrow_training_convs = options_.fuse_narrow_training_convs;
  return ctx;
}

void TwoPassStep::begin_image(std::int64_t tiles, int label, std::uint64_t dropout_seed, std::int64_t kept_tiles,
                              std::size_t kept_tail_layers) {
  BT_CHECK(tiles > 0, "two-pass step: an image needs at least one tile");
  BT_CHECK(kept_tiles >= 0, "two-pass step: kept_tiles must not be negative, got {}", kept_tiles);
  const std::size_t children = model_.encoder->size();
  BT_CHECK(kept_tail_layers < children && model_.encoder->splits_at(children - kept_tail_layers),
           "two-pass step: cannot keep the last {} of the encoder's {} children apart from the rest", kept_tail_layers,
           children);
  BT_CHECK((kept_tiles == 0 && kept_tail_layers == 0) || (!instance_ && options_.top_tiles == 0),
           "two-pass step: pass 1 keeps activations only when pass 2 trains every tile (not with top_tiles or the "
           "instance vote)");
  // A fresh H per image, the old one released first so two never coexist: the
  // caching allocator hands the same block back when the tile count repeats.
  end_image();
  h_ = Tensor::zeros({tiles, model_.encoder->feature_dim()}, DType::f32, backend_device(options_.backend));
  label_ = label;
  dropout_seed_ = dropout_seed;
  rows_filled_ = 0;
  kept_tiles_ = std::min(kept_tiles, tiles);
  tail_layers_ = kept_tiles_ == tiles ? 0 : kept_tail_layers;
  next_pass2_end_ = tiles;
}

std::int64_t TwoPassStep::recomputed_tiles() const {
  if (!h_.defined()) return 0;
  std::int64_t kept = 0;
  for (const KeptBatch& b : kept_) kept += b.rows;
  return h_.dim(0) - kept;
}

void TwoPassStep::end_image() {
  // A step abandoned between pass 1 and backward_kept leaves activations in the
  // layers' stacks: drop them so the next image starts clean.
  if (!kept_.empty() || tail_layers_ > 0) model_.encoder->clear_saved();
  kept_.clear();
  kept_tiles_ = 0;
  tail_layers_ = 0;
  h_ = Tensor();
  dh_ = Tensor();
  scores_ = Tensor();
  selected_.clear();
  is_selected_.clear();
  rows_filled_ = 0;
}

Tensor TwoPassStep::select_rows() {
  selected_.clear();
  is_selected_.clear();
  const std::int64_t n = h_.dim(0);
  if (options_.top_tiles == 0 || n <= options_.top_tiles) return h_;
  // Scoring: attention over all N, no dropout, nothing kept for backward.
  net::ForwardContext score_ctx = net::ForwardContext::inference(options_.backend);
  model_.aggregator->forward(h_, score_ctx);
  scores_ = model_.aggregator->attention().to(Device::cpu());
  return take_top_rows(scores_.to_vector(), options_.top_tiles);
}

Tensor TwoPassStep::take_top_rows(const std::vector<float>& scores, std::int64_t m) {
  const std::int64_t n = h_.dim(0);
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) order[static_cast<std::size_t>(k)] = k;
  // Ties (identical tiles) go to the lower index, so the choice is deterministic.
  std::partial_sort(order.begin(), order.begin() + m, order.end(), [&](std::int64_t x, std::int64_t y) {
    const float sx = scores[static_cast<std::size_t>(x)], sy = scores[static_cast<std::size_t>(y)];
    return sx > sy || (sx == sy && x < y);
  });
  selected_.assign(order.begin(), order.begin() + m);
  std::sort(selected_.begin(), selected_.end());
  is_selected_.assign(static_cast<std::size_t>(n), false);
  for (std::int64_t k : selected_) is_selected_[static_cast<std::size_t>(k)] = true;
  return gather_rows(selected_);
}

void TwoPassStep::store_rows(const Tensor& features, std::int64_t first_tile) {
  const std::int64_t rows = features.dim(0);
  BT_CHECK(first_tile >= 0 && first_tile + rows <= h_.dim(0), "two-pass step: rows [{}, {}) outside the image's {} tiles",
           first_tile, first_tile + rows, h_.dim(0));
  Tensor target = h_.slice_rows(first_tile, first_tile + rows);
  target.copy_from(features);
  rows_filled_ += rows;
}

void TwoPassStep::load_features(const Tensor& features) {
  BT_CHECK(h_.defined() && rows_filled_ == 0, "two-pass step: load_features needs a fresh begin_image");
  BT_CHECK(features.rank() == 2 && features.dim(0) == h_.dim(0) && features.dim(1) == h_.dim(1),
           "two-pass step: kept features {} for an image of {} tiles of {} features", features.describe(), h_.dim(0),
           h_.dim(1));
  store_rows(features, 0);
}

void TwoPassStep::pass1_batch(const Tensor& x, std::int64_t first_tile) {
  const bool keep = first_tile < kept_tiles_;
  if (keep || tail_layers_ == 0) {
    store_rows(model_.encoder->forward(x, encoder_context(keep, true)), first_tile);
    if (keep) kept_.push_back({first_tile, x.dim(0)});
    return;
  }
  net::Encoder& encoder = *model_.encoder;
  const Tensor front = encoder.forward_range(x, encoder_context(false, true), 0, tail_begin());
  store_rows(encoder.forward_range(front, encoder_context(true, true), tail_begin(), encoder.size()), first_tile);
}

void TwoPassStep::backward_kept() {
  BT_CHECK(kept_.empty() || dh_.defined(), "two-pass step: backward of the kept batches before finish_image");
  BT_CHECK(kept_.empty() || next_pass2_end_ == kept_.back().first_tile + kept_.back().rows,
           "two-pass step: the kept batches' backward before pass 2 reached them (pass 2 at tile {}, the kept end at "
           "{})",
           next_pass2_end_, kept_.back().first_tile + kept_.back().rows);
  for (; !kept_.empty(); kept_.pop_back()) {
    const KeptBatch& b = kept_.back();
    model_.encoder->backward(dh_.slice_rows(b.first_tile, b.first_tile + b.rows));
  }
  next_pass2_end_ = 0;
}

void TwoPassStep::train_instances_batch(const Tensor& x, std::int64_t first_tile, float loss_scale) {
  BT_CHECK(single_pass(), "two-pass step: train_instances_batch is the instance aggregator's without top_tiles; "
                          "the {} aggregator needs both passes",
           net::aggregator_kind_name(model_.aggregator->kind()));
  Tensor features = model_.encoder->forward(x, encoder_context(true, true));
  store_rows(features, first_tile);
  // cross_entropy averages over the batch; the image's loss averages over its tiles.
  const float share = static_cast<float>(features.dim(0)) / static_cast<float>(h_.dim(0));
  model_.encoder->backward(tiles_as_label_gradient(features, loss_scale * share));
}

Tensor TwoPassStep::tiles_as_label_gradient(const Tensor& features, float scale) {
  return tiles_gradient(features, scale, options_.label_smoothing);
}

Tensor TwoPassStep::tiles_gradient(const Tensor& features, float scale, float smoothing) {
  net::ForwardContext ctx;
  ctx.backend = options_.backend;
  ctx.training = true;
  ctx.keep_activations = true;
  Tensor logits = model_.head->forward(features, ctx);
  const std::int64_t rows = logits.dim(0);
  const Device device = backend_device(options_.backend);
  Tensor targets = Tensor::empty({rows}, DType::i32);
  std::fill_n(targets.data<std::int32_t>(), rows, label_);
  targets = targets.to(device);
  Tensor dlogits = Tensor::empty(logits.shape(), DType::f32, device);
  kernels::CrossEntropyOptions ce;
  ce.label_smoothing = smoothing;
  kernels::cross_entropy(options_.backend, logits, targets, nullptr, ce, dlogits);
  kernels::scale(options_.backend, scale, dlogits);
  return model_.head->backward(dlogits);
}

Tensor TwoPassStep::gather_rows(const std::vector<std::int64_t>& rows) const {
  Tensor out = Tensor::empty({static_cast<std::int64_t>(rows.size()), h_.dim(1)}, DType::f32, h_.device());
  for (std::size_t r = 0; r < rows.size(); ++r)
    out.slice_rows(static_cast<std::int64_t>(r), static_cast<std::int64_t>(r) + 1)
        .copy_from(h_.slice_rows(rows[r], rows[r] + 1));
  return out;
}

// The bag loss reaches a tile only through its share of the pooled feature, so once
// the attention has found the evidence the encoder still learns to read it only as
// a blend. Training the most attended tiles one by one gives each a gradient of its
// own; the least attended, trained to say nothing, keep the head from reading the
// background as a class. The selection is not differentiated (a ranking).
void TwoPassStep::train_attended_instances(const std::vector<float>& attention, float loss_scale) {
  const auto n = static_cast<std::int64_t>(attention.size());
  const std::int64_t k = std::min(options_.instance_k, n / 2);  // the two ends never share a tile
  if (k == 0) return;
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t x, std::int64_t y) {
    return attention[static_cast<std::size_t>(x)] > attention[static_cast<std::size_t>(y)];
  });
  // Positions in the aggregated rows -> rows of H (they differ under top_tiles).
  auto h_row = [&](std::int64_t position) { return selected_.empty() ? position : selected_[static_cast<std::size_t>(position)]; };
  std::vector<std::int64_t> top, bottom;
  for (std::int64_t i = 0; i < k; ++i) {
    top.push_back(h_row(order[static_cast<std::size_t>(i)]));
    bottom.push_back(h_row(order[static_cast<std::size_t>(n - 1 - i)]));
  }
  const float half = 0.5f * options_.instance_weight * loss_scale;
  const Tensor d_top = tiles_gradient(gather_rows(top), half, options_.label_smoothing);
  const Tensor d_bottom = tiles_gradient(gather_rows(bottom), half, 1.0f);
  for (std::size_t r = 0; r < top.size(); ++r) {
    const auto i = static_cast<std::int64_t>(r);
    Tensor row = dh_.slice_rows(top[r], top[r] + 1);
    kernels::axpy(options_.backend, 1.0f, d_top.slice_rows(i, i + 1), row);
    row = dh_.slice_rows(bottom[r], bottom[r] + 1);
    kernels::axpy(options_.backend, 1.0f, d_bottom.slice_rows(i, i + 1), row);
  }
}

// Campanella et al. 2019 (MIL for whole slides): the M tiles with the highest
// probability of the image's label get it as their own; the rest no gradient. At
// first the choice is near random; as soon as tiles of the label's objects score
// higher, the training concentrates on them and leaves out the clutter and the other
// objects that the plain instance loss trains with a wrong label.
void TwoPassStep::train_top_instances(float loss_scale) {
  const Tensor chosen = take_top_rows(label_probabilities_, std::min(options_.top_tiles, h_.dim(0)));
  scatter_selected_gradient(tiles_as_label_gradient(chosen, loss_scale));
}

void TwoPassStep::scatter_selected_gradient(const Tensor& dh) {
  // The unselected rows get no gradient; pass 2 skips them.
  dh_ = Tensor::zeros(h_.shape(), DType::f32, h_.device());
  for (std::size_t r = 0; r < selected_.size(); ++r)
    dh_.slice_rows(selected_[r], selected_[r] + 1)
        .copy_from(dh.slice_rows(static_cast<std::int64_t>(r), static_cast<std::int64_t>(r) + 1));
}

ImageOutcome TwoPassStep::vote() {
  net::ForwardContext ctx = net::ForwardContext::inference(options_.backend);
  const InstanceVote vote = instance_vote(model_.head->forward(h_, ctx).to(Device::cpu()), label_,
                                          options_.label_smoothing);
  const std::int64_t n = h_.dim(0);
  label_probabilities_.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    label_probabilities_[static_cast<std::size_t>(i)] = static_cast<float>(vote.tile_probability(i, label_));
  scores_ = vote.predicted_class_shares();
  return vote.outcome;
}

ImageLoss image_loss(Backend backend, const Tensor& logits, int label, float label_smoothing) {
  const Device device = backend_device(backend);
  Tensor targets = Tensor::empty({1}, DType::i32);
  targets.data<std::int32_t>()[0] = label;
  targets = targets.to(device);
  ImageLoss result;
  result.dlogits = Tensor::empty(logits.shape(), DType::f32, device);
  Tensor probabilities = Tensor::empty(logits.shape(), DType::f32, device);
  kernels::CrossEntropyOptions ce;
  ce.label_smoothing = label_smoothing;
  result.outcome.loss = kernels::cross_entropy(backend, logits, targets, nullptr, ce, result.dlogits, &probabilities);
  result.outcome.probabilities = probabilities.to_vector();
  return result;
}

ImageOutcome TwoPassStep::head_forward(bool training, float loss_scale) {
  BT_CHECK(h_.defined() && rows_filled_ == h_.dim(0), "two-pass step: {} of {} tile features computed before the head",
           rows_filled_, h_.defined() ? h_.dim(0) : 0);
  if (instance_) {
    ImageOutcome outcome = vote();
    // With top_tiles, the tiles most likely the label's are trained (pass 2);
    // without, every batch's gradients were taken in train_instances_batch.
    if (training && options_.top_tiles > 0) train_top_instances(loss_scale);
    return outcome;
  }
  net::ForwardContext ctx;
  ctx.backend = options_.backend;
  ctx.training = training;
  ctx.keep_activations = training;
  ctx.dropout_seed = dropout_seed_;
  Tensor z = model_.aggregator->forward(select_rows(), ctx);
  const bool instances = training && options_.instance_k > 0 && options_.instance_weight > 0.0f;
  const std::vector<float> attention =
      instances ? model_.aggregator->attention().to(Device::cpu()).to_vector() : std::vector<float>{};
  Tensor logits = model_.head->forward(z, ctx);
  auto [outcome, dlogits] = image_loss(options_.backend, logits, label_, options_.label_smoothing);
  outcome.tiles = h_.dim(0);
  if (training) {
    kernels::scale(options_.backend, loss_scale, dlogits);
    Tensor dz = model_.head->backward(dlogits);
    Tensor dh = model_.aggregator->backward(dz);
    if (selected_.empty())
      dh_ = dh;
    else
      scatter_selected_gradient(dh);
    if (instances) train_attended_instances(attention, loss_scale);
  }
  return outcome;
}

ImageOutcome TwoPassStep::finish_image(float loss_scale) { return head_forward(true, loss_scale); }

void TwoPassStep::pass2_batch(const Tensor& x, std::int64_t first_tile) {
  BT_CHECK(!single_pass(), "two-pass step: the instance aggregator trains in one pass (train_instances_batch)");
  BT_CHECK(dh_.defined(), "two-pass step: pass 2 before finish_image");
  const std::int64_t rows = x.dim(0);
  BT_CHECK(first_tile >= 0 && first_tile + rows <= dh_.dim(0), "two-pass step: rows [{}, {}) outside the image's {} tiles",
           first_tile, first_tile + rows, dh_.dim(0));
  BT_CHECK(first_tile >= kept_tiles_, "two-pass step: pass 2 of tiles [{}, {}), whose activations pass 1 kept",
           first_tile, first_tile + rows);
  // Last batch first, so gradients are summed in the order a step that kept
  // batches sums them (see two_pass.hpp).
  BT_CHECK(first_tile + rows == next_pass2_end_,
           "two-pass step: pass 2 takes the batches last first; got tiles [{}, {}), expected the batch ending at {}",
           first_tile, first_tile + rows, next_pass2_end_);
  next_pass2_end_ = first_tile;
  if (!selected_.empty()) return pass2_selected(x, first_tile);
  net::Encoder& encoder = *model_.encoder;
  const Tensor dh = dh_.slice_rows(first_tile, first_tile + rows);
  if (tail_layers_ == 0) {
    Tensor features = encoder.forward(x, encoder_context(true, false));
    BT_CHECK(features.dim(0) == rows, "two-pass step: encoder returned {} rows for {} tiles", features.dim(0), rows);
    encoder.backward(dh);
    return;
  }
  // The front's output is not needed: the tail kept its own input in pass 1.
  encoder.forward_range(x, encoder_context(true, false), 0, tail_begin());
  encoder.backward_range(encoder.backward_range(dh, tail_begin(), encoder.size()), 0, tail_begin());
}

void TwoPassStep::pass2_selected(const Tensor& x, std::int64_t first_tile) {
  std::vector<std::int64_t> rows;
  for (std::int64_t k = 0; k < x.dim(0); ++k)
    if (is_selected_[static_cast<std::size_t>(first_tile + k)]) rows.push_back(k);
  if (rows.empty()) return;  // no selected tile: no gradient to carry
  Shape shape = x.shape();
  shape[0] = static_cast<std::int64_t>(rows.size());
  Tensor xs = Tensor::empty(shape, DType::f32, x.device());
  Tensor dhs = Tensor::empty({shape[0], dh_.dim(1)}, DType::f32, dh_.device());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto to = static_cast<std::int64_t>(r);
    xs.slice_rows(to, to + 1).copy_from(x.slice_rows(rows[r], rows[r] + 1));
    dhs.slice_rows(to, to + 1).copy_from(dh_.slice_rows(first_tile + rows[r], first_tile + rows[r] + 1));
  }
  model_.encoder->forward(xs, encoder_context(true, false));
  model_.encoder->backward(dhs);
}

void TwoPassStep::eval_batch(const Tensor& x, std::int64_t first_tile) {
  net::ForwardContext ctx = net::ForwardContext::inference(options_.backend);
  ctx.compute_dtype = options_.encoder_compute_dtype;  // validation sees what training computes
  store_rows(model_.encoder->forward(x, ctx), first_tile);
}

ImageOutcome TwoPassStep::finish_eval() { return head_forward(false, 1.0f); }

}  // namespace bigtrain
