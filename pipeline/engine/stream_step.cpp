#include "pipeline/engine/stream_step.hpp"

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/elementwise.hpp"
#include "net/map_cells.hpp"

namespace bigtrain {

StreamStep::StreamStep(const ImageModel& model, const StreamStepOptions& options, bool training)
    : model_(model), options_(options), training_(training), trunk_(*model.encoder) {
  BT_CHECK(model.encoder && model.aggregator && model.head, "stream step: encoder, aggregator and head are required");
  BT_CHECK(model.aggregator->kind() != net::AggregatorKind::instance,
           "tiler.mode stream: the instance aggregator classifies tiles, and a streaming tile is no instance (use "
           "mean, max or attention over the feature map's cells)");
  BT_CHECK(options.tile > 0, "tiler.mode stream: tiler.tile must be positive, got {}", options.tile);
  try {
    trunk_.receptive_field(trunk_context());
  } catch (const Error& error) {
    throw Error(fmt::format("tiler.mode stream cannot run this encoder: {}", error.what()));
  }
}

net::ForwardContext StreamStep::trunk_context() const {
  net::ForwardContext ctx = net::ForwardContext::inference(options_.backend);
  ctx.compute_dtype = options_.encoder_compute_dtype;
  if (training_) {
    ctx.training = true;
    ctx.freeze_bn = options_.freeze_bn;
    ctx.update_bn_running_stats = false;
  }
  return ctx;
}

net::StreamPlan StreamStep::plan(const Shape& image) const { return trunk_.plan(image, options_.tile, trunk_context()); }

ImageOutcome StreamStep::head(const Tensor& map, int label, bool training, std::uint64_t dropout_seed,
                              float loss_scale, Tensor* dmap) {
  net::ForwardContext ctx = net::ForwardContext::inference(options_.backend);
  ctx.training = training;
  ctx.keep_activations = training;
  ctx.dropout_seed = dropout_seed;
  cells_ = net::map_cells(map);
  const Tensor logits = model_.head->forward(model_.aggregator->forward(cells_, ctx), ctx);
  auto [outcome, dlogits] = image_loss(options_.backend, logits, label, options_.label_smoothing);
  outcome.tiles = static_cast<std::int64_t>(plan_.tiles.size());
  if (training) {
    kernels::scale(options_.backend, loss_scale, dlogits);
    *dmap = net::map_from_cells(model_.aggregator->backward(model_.head->backward(dlogits)), map.shape());
  }
  return outcome;
}

ImageOutcome StreamStep::train_image(net::RegionReader& image, int label, std::uint64_t dropout_seed,
                                     float loss_scale) {
  BT_CHECK(training_, "stream step: made for inference, asked to train");
  plan_ = plan(image.image_shape());
  const net::ForwardContext ctx = trunk_context();
  Tensor map = trunk_.forward(image, plan_, ctx);
  Tensor dmap;
  const ImageOutcome outcome = head(map, label, true, dropout_seed, loss_scale, &dmap);
  // Only the gradient is needed from here: the map and its cells go before the trunk
  // recomputes its tiles.
  map = Tensor();
  cells_ = Tensor();
  trunk_.backward(image, plan_, dmap, ctx);
  return outcome;
}

ImageOutcome StreamStep::eval_image(net::RegionReader& image, int label) {
  plan_ = plan(image.image_shape());
  net::ForwardContext ctx = net::ForwardContext::inference(options_.backend);
  ctx.compute_dtype = options_.encoder_compute_dtype;  // evaluation sees what training computes
  const Tensor map = trunk_.forward(image, plan_, ctx);
  return head(map, label, false, 0, 1.0f, nullptr);
}

}  // namespace bigtrain
