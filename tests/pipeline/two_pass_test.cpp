// The two-pass tile step against one graph holding every tile batch of the image
// alive at once (same batches, same order): the gradients of the encoder, the
// aggregator and the head must agree, for every aggregator, with BatchNorm in
// training mode and frozen. And its memory must not grow with the tile count
// beyond the features and their gradients.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>

#include "kernels/core/error.hpp"

#include "kernels/core/allocator.hpp"
#include "kernels/core/host_allocator.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/elementwise.hpp"
#include "net/aggregator.hpp"
#include "net/model.hpp"
#include "net/relu.hpp"
#include "pipeline/engine/two_pass.hpp"
#include "tests/support/op_check.hpp"
#include "tests/support/relative_error.hpp"
#include "tests/support/small_image_network.hpp"

namespace bigtrain {
namespace {

using Network = testing::SmallImageNetwork;

Network make_network(const net::AggregatorSpec& aggregator, std::int64_t stem_channels = 8) {
  return testing::make_small_image_network(aggregator, static_cast<double>(stem_channels) / 64.0, 1234, 99,
                                           "two_pass_test");
}

std::vector<Tensor> make_batches(std::int64_t tiles, std::int64_t batch, std::int64_t size, std::uint64_t seed) {
  std::vector<Tensor> batches;
  for (std::int64_t first = 0; first < tiles; first += batch) {
    const std::int64_t count = std::min(batch, tiles - first);
    batches.push_back(testing::random_tensor({count, 1, size, size}, seed + static_cast<std::uint64_t>(first)));
  }
  return batches;
}

// The whole image as one graph: every batch forwarded with its activations kept,
// then one backward through head, aggregator and (in reverse) every batch.
void one_graph_gradients(Network& network, const std::vector<Tensor>& batches, int label, bool freeze_bn,
                         std::uint64_t dropout_seed) {
  net::Encoder& encoder = network.model->encoder();
  net::ForwardContext ctx;
  ctx.backend = Backend::cpu;
  ctx.training = true;
  ctx.keep_activations = true;
  ctx.freeze_bn = freeze_bn;
  ctx.update_bn_running_stats = !freeze_bn;
  std::int64_t tiles = 0;
  for (const auto& b : batches) tiles += b.dim(0);
  Tensor h = Tensor::empty({tiles, encoder.feature_dim()});
  std::int64_t row = 0;
  for (const auto& b : batches) {
    Tensor f = encoder.forward(b, ctx);
    h.slice_rows(row, row + b.dim(0)).copy_from(f);
    row += b.dim(0);
  }
  // Every batch's activations are alive at once: each layer holds one saved entry per batch.
  EXPECT_GT(encoder.saved_count(), 0u);
  EXPECT_EQ(encoder.saved_count() % batches.size(), 0u);
  net::ForwardContext head_ctx{.backend = Backend::cpu, .training = true, .keep_activations = true,
                               .dropout_seed = dropout_seed};
  Tensor logits = network.model->head().forward(network.aggregator->forward(h, head_ctx), head_ctx);
  Tensor targets = Tensor::empty({1}, DType::i32);
  targets.data<std::int32_t>()[0] = label;
  Tensor dlogits = Tensor::empty(logits.shape());
  kernels::cross_entropy(Backend::cpu, logits, targets, nullptr, {}, dlogits);
  Tensor dh = network.aggregator->backward(network.model->head().backward(dlogits));
  for (std::size_t k = batches.size(); k-- > 0;) {
    row -= batches[k].dim(0);
    encoder.backward(dh.slice_rows(row, row + batches[k].dim(0)));
  }
}

using testing::relative_error;

// The selected tiles' inputs, in selection order, from batches of `batch` tiles.
Tensor gather_tiles(const std::vector<Tensor>& batches, const std::vector<std::int64_t>& selected, std::int64_t batch) {
  Shape shape = batches.front().shape();
  shape[0] = static_cast<std::int64_t>(selected.size());
  Tensor chosen = Tensor::empty(shape);
  for (std::size_t r = 0; r < selected.size(); ++r) {
    const std::int64_t k = selected[r], row = static_cast<std::int64_t>(r);
    chosen.slice_rows(row, row + 1)
        .copy_from(batches[static_cast<std::size_t>(k / batch)].slice_rows(k % batch, k % batch + 1));
  }
  return chosen;
}

// Every selected tile scores at least as high as every tile left out.
void expect_selected_score_highest(const std::vector<std::int64_t>& selected, const std::vector<double>& scores) {
  double lowest_selected = std::numeric_limits<double>::infinity(), highest_other = -lowest_selected;
  for (std::size_t k = 0; k < scores.size(); ++k) {
    const bool chosen = std::find(selected.begin(), selected.end(), static_cast<std::int64_t>(k)) != selected.end();
    if (chosen) lowest_selected = std::min(lowest_selected, scores[k]);
    else highest_other = std::max(highest_other, scores[k]);
  }
  EXPECT_GE(lowest_selected, highest_other);
}

// Pass 2's order: the batches last first, each with its first tile's row.
void for_batches_last_first(const std::vector<Tensor>& batches,
                            const std::function<void(const Tensor&, std::int64_t)>& visit) {
  std::vector<std::int64_t> firsts;
  std::int64_t first = 0;
  for (const auto& b : batches) {
    firsts.push_back(first);
    first += b.dim(0);
  }
  for (std::size_t k = batches.size(); k-- > 0;) visit(batches[k], firsts[k]);
}

struct EquivalenceCase {
  std::string label;
  net::AggregatorSpec aggregator;
  bool freeze_bn;
};

class GradientEquivalence : public ::testing::TestWithParam<EquivalenceCase> {};

TEST_P(GradientEquivalence, TwoPassEqualsOneGraph) {
  const auto& c = GetParam();
  Network two_pass = make_network(c.aggregator), one_graph = make_network(c.aggregator);
  const auto batches = make_batches(/*tiles=*/11, /*batch=*/4, /*size=*/32, 7);  // batches of 4, 4, 3
  const int label = 2;
  const std::uint64_t dropout_seed = 17;

  ImageModel model = two_pass.image_model();
  model.zero_grad();
  TwoPassStep step(model, {.backend = Backend::cpu, .freeze_bn = c.freeze_bn});
  step.begin_image(11, label, dropout_seed);
  std::int64_t first = 0;
  for (const auto& b : batches) {
    step.pass1_batch(b, first);
    EXPECT_EQ(model.encoder->saved_count(), 0u) << "pass 1 keeps no activations";
    first += b.dim(0);
  }
  step.finish_image(1.0f);
  for_batches_last_first(batches, [&](const Tensor& b, std::int64_t first_tile) {
    step.pass2_batch(b, first_tile);
    EXPECT_EQ(model.encoder->saved_count(), 0u) << "pass 2 frees each batch's activations";
  });

  ImageModel reference = one_graph.image_model();
  reference.zero_grad();
  one_graph_gradients(one_graph, batches, label, c.freeze_bn, dropout_seed);

  const auto params = model.parameters(), reference_params = reference.parameters();
  ASSERT_EQ(params.size(), reference_params.size());
  double worst = 0.0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    ASSERT_EQ(params[i]->name, reference_params[i]->name);
    ASSERT_TRUE(params[i]->grad.defined()) << params[i]->name;
    const double error = relative_error(params[i]->grad, reference_params[i]->grad);
    worst = std::max(worst, error);
    // The spec's bound for float32: both sides run the same kernels on the same
    // batches, so anything above rounding noise is a real difference.
    EXPECT_LT(error, 1e-5) << params[i]->name;
    EXPECT_GT(testing::to_doubles(reference_params[i]->grad).size(), 0u);
  }
  // Running statistics moved once per batch in both (or not at all when frozen).
  const auto buffers = two_pass.model->state().buffers, reference_buffers = one_graph.model->state().buffers;
  for (std::size_t i = 0; i < buffers.size(); ++i)
    EXPECT_LT(relative_error(buffers[i]->value, reference_buffers[i]->value), 1e-6) << buffers[i]->name;
  const auto counters = two_pass.model->state().counters, reference_counters = one_graph.model->state().counters;
  for (std::size_t i = 0; i < counters.size(); ++i) {
    EXPECT_EQ(counters[i]->value, reference_counters[i]->value) << counters[i]->name;
    EXPECT_EQ(counters[i]->value, c.freeze_bn ? 0 : 3) << counters[i]->name;
  }
  RecordProperty("worst_relative_error", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(
    Aggregators, GradientEquivalence,
    ::testing::Values(EquivalenceCase{"mean_bn_train", {net::AggregatorKind::mean}, false},
                      EquivalenceCase{"mean_bn_frozen", {net::AggregatorKind::mean}, true},
                      EquivalenceCase{"max_bn_train", {net::AggregatorKind::max}, false},
                      EquivalenceCase{"max_bn_frozen", {net::AggregatorKind::max}, true},
                      EquivalenceCase{"attention_bn_train", {net::AggregatorKind::attention, 16, true, 0.25f}, false},
                      EquivalenceCase{"attention_bn_frozen", {net::AggregatorKind::attention, 16, true}, true},
                      EquivalenceCase{"attention_plain_bn_train", {net::AggregatorKind::attention, 16, false}, false}),
    [](const auto& info) { return info.param.label; });

// aggregator.top_tiles (Iterative Patch Selection): the step's gradients are those of
// one graph built on the selected tiles alone, and the selected tiles are the ones
// the scoring attention over all tiles ranks highest.
TEST(TopTiles, GradientsEqualOneGraphOnTheSelectedTiles) {
  const net::AggregatorSpec aggregator{net::AggregatorKind::attention, 16, true};
  Network two_pass = make_network(aggregator), one_graph = make_network(aggregator);
  const std::int64_t tiles = 11, top = 4;
  const auto batches = make_batches(tiles, /*batch=*/4, /*size=*/32, 21);
  const int label = 1;
  ImageModel model = two_pass.image_model();
  model.zero_grad();
  TwoPassStep step(model, {.backend = Backend::cpu, .freeze_bn = true, .top_tiles = top});
  step.begin_image(tiles, label, 0);
  std::int64_t first = 0;
  for (const auto& b : batches) {
    step.pass1_batch(b, first);
    first += b.dim(0);
  }
  step.finish_image(1.0f);
  const std::vector<std::int64_t> selected = step.selected_tiles();
  ASSERT_EQ(selected.size(), static_cast<std::size_t>(top));
  const std::vector<float> scores = step.attention().to_vector();
  ASSERT_EQ(scores.size(), static_cast<std::size_t>(tiles)) << "attention() covers every tile";
  expect_selected_score_highest(selected, std::vector<double>(scores.begin(), scores.end()));
  for_batches_last_first(batches, [&](const Tensor& b, std::int64_t first_tile) { step.pass2_batch(b, first_tile); });

  // The reference: the selected tiles' inputs as one image of `top` tiles.
  const Tensor chosen = gather_tiles(batches, selected, /*batch=*/4);
  ImageModel reference = one_graph.image_model();
  reference.zero_grad();
  one_graph_gradients(one_graph, {chosen}, label, /*freeze_bn=*/true, 0);
  const auto params = model.parameters(), reference_params = reference.parameters();
  ASSERT_EQ(params.size(), reference_params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(params[i]->grad.defined()) << params[i]->name;
    // Same kernels on the same tiles (sub-batches of frozen BatchNorm are per tile).
    EXPECT_LT(relative_error(params[i]->grad, reference_params[i]->grad), 1e-5) << params[i]->name;
  }
}

TEST(TopTiles, NeedsAttention) {
  Network network = make_network({net::AggregatorKind::mean});
  EXPECT_THROW(TwoPassStep(network.image_model(), {.backend = Backend::cpu, .top_tiles = 4}), Error);
}

// aggregator.kind instance: one pass, each batch's gradients at once. They must be
// those of one graph in which every tile is classified by the head and the loss is
// the mean over the image's tiles of each tile's cross-entropy with the image's
// label; the image's prediction is the softmax of the mean of the tiles' log-softmax.
TEST(InstanceVote, OnePassGradientsEqualOneGraphOfTheMeanTileLoss) {
  for (const bool freeze_bn : {false, true}) {
    SCOPED_TRACE(freeze_bn ? "BatchNorm frozen" : "BatchNorm training");
    const net::AggregatorSpec aggregator{net::AggregatorKind::instance};
    Network one_pass = make_network(aggregator), one_graph = make_network(aggregator);
    const std::int64_t tiles = 11;
    const auto batches = make_batches(tiles, /*batch=*/4, /*size=*/32, 5);
    const int label = 2;
    const float loss_scale = 0.5f;
    ImageModel model = one_pass.image_model();
    model.zero_grad();
    TwoPassStep step(model, {.backend = Backend::cpu, .freeze_bn = freeze_bn});
    ASSERT_TRUE(step.single_pass());
    step.begin_image(tiles, label, 0);
    std::int64_t first = 0;
    for (const auto& b : batches) {
      step.train_instances_batch(b, first, loss_scale);
      EXPECT_EQ(model.encoder->saved_count(), 0u) << "each batch frees its activations";
      first += b.dim(0);
    }
    const ImageOutcome outcome = step.finish_image(loss_scale);
    EXPECT_THROW(step.pass2_batch(batches[0], 0), Error);

    // The reference graph: all tiles forwarded with activations kept, one loss.
    net::Encoder& encoder = one_graph.model->encoder();
    ImageModel reference = one_graph.image_model();
    reference.zero_grad();
    net::ForwardContext ctx{.backend = Backend::cpu, .training = true, .keep_activations = true};
    ctx.freeze_bn = freeze_bn;
    ctx.update_bn_running_stats = !freeze_bn;
    std::vector<Tensor> logits;
    for (const auto& b : batches) logits.push_back(one_graph.model->head().forward(encoder.forward(b, ctx), ctx));
    // Backward in reverse: each batch's share of the mean over all tiles.
    std::vector<std::vector<double>> log_softmax_rows;
    for (std::size_t k = batches.size(); k-- > 0;) {
      Tensor targets = Tensor::empty({batches[k].dim(0)}, DType::i32);
      std::fill_n(targets.data<std::int32_t>(), batches[k].dim(0), label);
      Tensor dlogits = Tensor::empty(logits[k].shape());
      kernels::cross_entropy(Backend::cpu, logits[k], targets, nullptr, {}, dlogits);
      kernels::scale(Backend::cpu, loss_scale * static_cast<float>(batches[k].dim(0)) / tiles, dlogits);
      encoder.backward(one_graph.model->head().backward(dlogits));
    }
    const auto params = model.parameters(), reference_params = reference.parameters();
    ASSERT_EQ(params.size(), reference_params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (!reference_params[i]->grad.defined()) continue;  // the instance aggregator has no parameters
      ASSERT_TRUE(params[i]->grad.defined()) << params[i]->name;
      EXPECT_LT(relative_error(params[i]->grad, reference_params[i]->grad), 1e-5) << params[i]->name;
    }

    // The vote from the weights after the step's forward (the gradients were not applied).
    std::vector<double> mean_log_p(3, 0.0);
    for (const auto& l : logits) {
      const auto v = l.to_vector();
      for (std::int64_t r = 0; r < l.dim(0); ++r) {
        double top = -1e300, sum = 0.0;
        for (int c = 0; c < 3; ++c) top = std::max(top, static_cast<double>(v[static_cast<std::size_t>(r * 3 + c)]));
        for (int c = 0; c < 3; ++c) sum += std::exp(v[static_cast<std::size_t>(r * 3 + c)] - top);
        for (int c = 0; c < 3; ++c)
          mean_log_p[static_cast<std::size_t>(c)] += (v[static_cast<std::size_t>(r * 3 + c)] - top - std::log(sum)) / tiles;
      }
    }
    {  // H holds the features of those same batches, BatchNorm in training mode or not
      double norm = 0.0;
      for (double m : mean_log_p) norm += std::exp(m);
      ASSERT_EQ(outcome.probabilities.size(), 3u);
      for (int c = 0; c < 3; ++c)
        EXPECT_NEAR(outcome.probabilities[static_cast<std::size_t>(c)], std::exp(mean_log_p[static_cast<std::size_t>(c)]) / norm, 1e-5);
      EXPECT_NEAR(outcome.loss, -std::log(std::exp(mean_log_p[label]) / norm), 1e-5);
    }
    const std::vector<float> weights = step.attention().to_vector();
    ASSERT_EQ(weights.size(), static_cast<std::size_t>(tiles));
    double total = 0.0;
    for (float w : weights) total += w;
    EXPECT_NEAR(total, 1.0, 1e-5) << "each tile's share of the predicted class, summing to 1";
  }
}

// With top_tiles M the instance vote trains the M tiles with the highest probability
// of the label (Campanella et al. 2019) in two passes: the gradients must be those of
// the mean tile loss over those M tiles alone, and they must be the M most likely.
TEST(InstanceVote, TopTilesTrainTheTilesMostLikelyTheLabel) {
  const net::AggregatorSpec aggregator{net::AggregatorKind::instance};
  Network two_pass = make_network(aggregator), one_graph = make_network(aggregator);
  const std::int64_t tiles = 11, top = 3;
  const auto batches = make_batches(tiles, /*batch=*/4, /*size=*/32, 8);
  const int label = 1;
  ImageModel model = two_pass.image_model();
  model.zero_grad();
  TwoPassStep step(model, {.backend = Backend::cpu, .freeze_bn = true, .top_tiles = top});
  ASSERT_FALSE(step.single_pass());
  step.begin_image(tiles, label, 0);
  std::int64_t first = 0;
  for (const auto& b : batches) {
    step.pass1_batch(b, first);
    first += b.dim(0);
  }
  step.finish_image(1.0f);
  const std::vector<std::int64_t> selected = step.selected_tiles();
  ASSERT_EQ(selected.size(), static_cast<std::size_t>(top));
  // The label's probability of every tile, from the head on the features.
  const Tensor logits = two_pass.model->head().forward(step.features(), net::ForwardContext::inference(Backend::cpu));
  const auto v = logits.to_vector();
  std::vector<double> p_label(static_cast<std::size_t>(tiles));
  for (std::int64_t t = 0; t < tiles; ++t) {
    double sum = 0.0;
    for (int c = 0; c < 3; ++c) sum += std::exp(v[static_cast<std::size_t>(t * 3 + c)]);
    p_label[static_cast<std::size_t>(t)] = std::exp(v[static_cast<std::size_t>(t * 3 + label)]) / sum;
  }
  expect_selected_score_highest(selected, p_label);
  for_batches_last_first(batches, [&](const Tensor& b, std::int64_t first_tile) { step.pass2_batch(b, first_tile); });

  // The reference: the selected tiles as one batch, mean tile loss, one backward.
  const Tensor chosen = gather_tiles(batches, selected, /*batch=*/4);
  ImageModel reference = one_graph.image_model();
  reference.zero_grad();
  net::ForwardContext ctx{.backend = Backend::cpu, .training = true, .keep_activations = true};
  ctx.freeze_bn = true;
  Tensor reference_logits = one_graph.model->head().forward(one_graph.model->encoder().forward(chosen, ctx), ctx);
  Tensor targets = Tensor::empty({top}, DType::i32);
  std::fill_n(targets.data<std::int32_t>(), top, label);
  Tensor dlogits = Tensor::empty(reference_logits.shape());
  kernels::cross_entropy(Backend::cpu, reference_logits, targets, nullptr, {}, dlogits);
  one_graph.model->encoder().backward(one_graph.model->head().backward(dlogits));
  const auto params = model.parameters(), reference_params = reference.parameters();
  ASSERT_EQ(params.size(), reference_params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!reference_params[i]->grad.defined()) continue;
    ASSERT_TRUE(params[i]->grad.defined()) << params[i]->name;
    EXPECT_LT(relative_error(params[i]->grad, reference_params[i]->grad), 1e-5) << params[i]->name;
  }
}

TEST(InstanceVote, PooledAggregatorsHaveNoOnePassTraining) {
  Network network = make_network({net::AggregatorKind::mean});
  TwoPassStep step(network.image_model(), {.backend = Backend::cpu});
  EXPECT_FALSE(step.single_pass());
  step.begin_image(2, 0, 0);
  EXPECT_THROW(step.train_instances_batch(testing::random_tensor({2, 1, 32, 32}, 1), 0, 1.0f), Error);
}

// Peak host allocator bytes of one two-pass image step above what was held before.
std::size_t peak_bytes_of_step(Network& network, std::int64_t tiles, std::int64_t batch, std::int64_t size) {
  ImageModel model = network.image_model();
  model.zero_grad();
  TwoPassStep step(model, {.backend = Backend::cpu});
  Allocator& allocator = allocator_for(Device::cpu());
  // Batches are generated one at a time inside the measured region, as the tile
  // stream delivers them: never all of the image at once.
  auto run = [&] {
    step.begin_image(tiles, 1, 3);
    for (std::int64_t first = 0; first < tiles; first += batch) {
      const std::int64_t count = std::min(batch, tiles - first);
      step.pass1_batch(testing::random_tensor({count, 1, size, size}, static_cast<std::uint64_t>(first)), first);
    }
    step.finish_image(1.0f);
    for (std::int64_t first = ((tiles - 1) / batch) * batch; first >= 0; first -= batch) {  // last batch first
      const std::int64_t count = std::min(batch, tiles - first);
      step.pass2_batch(testing::random_tensor({count, 1, size, size}, static_cast<std::uint64_t>(first)), first);
    }
    step.end_image();
  };
  run();  // warm-up: op caches, gradients and workspaces exist afterwards
  allocator.reset_peak();
  const std::size_t before = allocator.stats().current_bytes;
  run();
  return allocator.stats().peak_bytes - before;
}

// Allocator rounding: each tensor that grows with N may round up by one step.
std::size_t rounding_slack(int tensors) { return static_cast<std::size_t>(tensors) * HostAllocator::rounded_size(4096); }

TEST(TwoPassMemory, PeakGrowsOnlyByFeaturesAndTheirGradients) {
  Network network = make_network({net::AggregatorKind::mean});
  const std::int64_t d = network.model->encoder().feature_dim();
  const std::size_t small = peak_bytes_of_step(network, 16, 8, 32);
  const std::size_t large = peak_bytes_of_step(network, 400, 8, 32);
  const std::size_t features_and_grads = (400 - 16) * 2 * static_cast<std::size_t>(d) * sizeof(float);
  RecordProperty("peak_16_tiles", std::to_string(small));
  RecordProperty("peak_400_tiles", std::to_string(large));
  std::printf("two-pass peak (mean aggregator, D=%lld, batch 8 of 32x32): 16 tiles %zu B, 400 tiles %zu B, "
              "difference %zd B, N x D features + gradients %zu B\n",
              static_cast<long long>(d), small, large, static_cast<std::ptrdiff_t>(large - small), features_and_grads);
  EXPECT_LE(large, small + features_and_grads + rounding_slack(2));
  // Holding every batch's activations (the one-graph way) would grow by far more:
  // the bound is tight enough to catch that.
  EXPECT_GT(small, features_and_grads / 4);
}

TEST(TwoPassMemory, AttentionAddsOnlyPerTileTemporaries) {
  const std::int64_t hidden = 16;
  Network network = make_network({net::AggregatorKind::attention, hidden, true});
  const std::int64_t d = network.model->encoder().feature_dim();
  const std::size_t small = peak_bytes_of_step(network, 16, 8, 32);
  const std::size_t large = peak_bytes_of_step(network, 400, 8, 32);
  // Besides H and dL/dH, the attention backward holds two more N x D partial
  // gradients (through V and U, summed into dL/dH) and a few N x hidden
  // intermediates: still O(N x D), independent of tile size and encoder depth.
  const std::size_t allowed = (400 - 16) * (4 * static_cast<std::size_t>(d) + 6 * hidden + 4) * sizeof(float);
  std::printf("two-pass peak (gated attention): 16 tiles %zu B, 400 tiles %zu B, difference %zd B, allowed %zu B\n",
              small, large, static_cast<std::ptrdiff_t>(large - small), allowed);
  EXPECT_LE(large, small + allowed + rounding_slack(10));
}


// ---- train.memory_budget: pass 1 keeps some batches' activations ------------------

struct KeptRun {
  std::vector<std::vector<float>> gradients;  // per parameter
  std::vector<std::vector<float>> buffers;    // BatchNorm's running statistics after the step
  std::vector<std::int64_t> counters;         // num_batches_tracked
  std::size_t saved_after_pass1 = 0, saved_after_step = 0;
  std::int64_t recomputed = 0, pass2_batches = 0;
};

// One image of 11 tiles in batches of 4, 4, 3; pass 1 keeps the batches starting
// below kept_tiles and the last tail_layers encoder children of the others, pass 2
// runs the others last first, then the kept ones' backward.
KeptRun run_keeping(std::int64_t kept_tiles, bool freeze_bn, bool fuse, const net::AggregatorSpec& aggregator,
                    std::size_t tail_layers = 0) {
  Network network = make_network(aggregator);
  const auto batches = make_batches(11, 4, 32, 7);
  ImageModel model = network.image_model();
  model.zero_grad();
  TwoPassStep step(model, {.backend = Backend::cpu, .freeze_bn = freeze_bn, .fuse_conv_bn = fuse,
                           .fuse_narrow_training_convs = fuse});
  step.begin_image(11, 2, 17, kept_tiles, tail_layers);
  std::int64_t first = 0;
  for (const auto& b : batches) {
    step.pass1_batch(b, first);
    first += b.dim(0);
  }
  KeptRun run;
  run.saved_after_pass1 = model.encoder->saved_count();
  run.recomputed = step.recomputed_tiles();
  step.finish_image(0.5f);
  for_batches_last_first(batches, [&](const Tensor& b, std::int64_t first_tile) {
    if (first_tile < kept_tiles) return;  // the tile stream does not read these (StreamJob::skip_batches)
    step.pass2_batch(b, first_tile);
    ++run.pass2_batches;
  });
  step.backward_kept();
  run.saved_after_step = model.encoder->saved_count();
  step.end_image();
  for (net::Parameter* p : model.parameters()) run.gradients.push_back(p->grad.to_vector());
  const net::StateRefs state = model.encoder->state();
  for (const net::Buffer* b : state.buffers) run.buffers.push_back(b->value.to_vector());
  for (const net::Counter* c : state.counters) run.counters.push_back(c->value);
  return run;
}

TEST(KeptActivations, GradientsAreBitIdenticalWhicheverBatchesPass1Kept) {
  const net::AggregatorSpec attention{net::AggregatorKind::attention, 16, true, 0.25f};
  for (const bool freeze_bn : {false, true}) {
    SCOPED_TRACE(freeze_bn ? "BatchNorm frozen" : "BatchNorm training");
    const KeptRun recomputed = run_keeping(0, freeze_bn, false, attention);
    EXPECT_EQ(recomputed.saved_after_pass1, 0u);
    EXPECT_EQ(recomputed.pass2_batches, 3);
    for (const std::int64_t kept : {4, 8, 11}) {
      SCOPED_TRACE(fmt::format("kept_tiles {}", kept));
      const KeptRun run = run_keeping(kept, freeze_bn, false, attention);
      EXPECT_GT(run.saved_after_pass1, 0u) << "pass 1 keeps what backward needs";
      EXPECT_EQ(run.saved_after_step, 0u) << "the kept batches' backward frees them";
      EXPECT_EQ(run.recomputed, 11 - kept);
      EXPECT_EQ(run.pass2_batches, 3 - (kept + 3) / 4);
      ASSERT_EQ(run.gradients.size(), recomputed.gradients.size());
      for (std::size_t i = 0; i < run.gradients.size(); ++i) {
        ASSERT_FALSE(run.gradients[i].empty());
        // Bit for bit: the same kernels on the same batches, summed in the same order.
        EXPECT_EQ(run.gradients[i], recomputed.gradients[i]) << "parameter " << i;
      }
    }
  }
}

TEST(KeptActivations, GradientsAreBitIdenticalWhicheverTailPass1Kept) {
  const net::AggregatorSpec attention{net::AggregatorKind::attention, 16, true, 0.25f};
  const std::size_t children = make_network(attention).model->encoder().size();
  ASSERT_GE(children, 6u);
  for (const bool freeze_bn : {false, true}) {
    SCOPED_TRACE(freeze_bn ? "BatchNorm frozen" : "BatchNorm training");
    const KeptRun recomputed = run_keeping(0, freeze_bn, false, attention);
    int tails = 0;
    for (std::size_t tail = 1; tail < children; ++tail) {
      if (!make_network(attention).model->encoder().splits_at(children - tail)) continue;
      ++tails;
      for (const std::int64_t kept : {0, 4}) {
        SCOPED_TRACE(fmt::format("tail of {} children, kept_tiles {}", tail, kept));
        const KeptRun run = run_keeping(kept, freeze_bn, false, attention, tail);
        EXPECT_GT(run.saved_after_pass1, 0u) << "pass 1 keeps the tail's activations";
        EXPECT_EQ(run.saved_after_step, 0u) << "pass 2 and the kept batches' backward free them";
        EXPECT_EQ(run.recomputed, 11 - kept) << "pass 2 still runs the front of every batch not kept whole";
        ASSERT_EQ(run.gradients.size(), recomputed.gradients.size());
        for (std::size_t i = 0; i < run.gradients.size(); ++i)
          EXPECT_EQ(run.gradients[i], recomputed.gradients[i]) << "parameter " << i;
        EXPECT_EQ(run.buffers, recomputed.buffers) << "running statistics move once per batch, in pass 1";
        EXPECT_EQ(run.counters, recomputed.counters);
      }
    }
    EXPECT_GE(tails, 4) << "the stem's BatchNorm and ReLU run as one: no split between them, every other";
  }
}

TEST(KeptActivations, ATailThatSplitsAFusedPairIsAnError) {
  Network network = make_network({net::AggregatorKind::mean});
  net::Encoder& encoder = network.model->encoder();
  ASSERT_TRUE(dynamic_cast<net::ReLU*>(&encoder.at(2)) != nullptr) << "conv1, bn1, relu: the stem";
  ASSERT_TRUE(dynamic_cast<net::ReLU*>(&encoder.at(5)) != nullptr) << "conv2, bn2, relu";
  EXPECT_FALSE(encoder.splits_at(1)) << "a convolution and its BatchNorm run as one op";
  EXPECT_FALSE(encoder.splits_at(2)) << "a BatchNorm and its ReLU run as one op";
  EXPECT_TRUE(encoder.splits_at(3));
  TwoPassStep step(network.image_model(), {.backend = Backend::cpu});
  EXPECT_THROW(step.begin_image(8, 1, 0, 0, encoder.size() - 1), Error);
  EXPECT_THROW(step.begin_image(8, 1, 0, 0, encoder.size() - 2), Error);
  EXPECT_THROW(step.begin_image(8, 1, 0, 0, encoder.size()), Error) << "the whole encoder is not a tail";
  EXPECT_NO_THROW(step.begin_image(8, 1, 0, 0, encoder.size() - 3));
}

// With frozen BatchNorm every pass runs each convolution with its BatchNorm as one op,
// the kept batches' and tails' pass 1 too (net/conv_bn_fusion.hpp), so which batches
// or layers pass 1 kept changes no bit of the gradients.
TEST(KeptActivations, FusedKeptAndRecomputedStepsAreBitIdentical) {
  const net::AggregatorSpec mean{net::AggregatorKind::mean};
  const KeptRun recomputed = run_keeping(0, true, true, mean);
  // The longest and the shortest tail that do not split a fused pair.
  const Network network = make_network(mean);
  const net::Encoder& encoder = network.model->encoder();
  std::size_t longest = 0, shortest = 0;
  for (std::size_t tail = 1; tail < encoder.size(); ++tail)
    if (encoder.splits_at(encoder.size() - tail)) longest = tail, shortest = shortest == 0 ? tail : shortest;
  ASSERT_GT(longest, shortest);
  for (const auto& [what, run] :
       {std::pair{"8 tiles kept", run_keeping(8, true, true, mean)},
        std::pair{"the longest tail kept", run_keeping(0, true, true, mean, longest)},
        std::pair{"4 tiles and the shortest tail kept", run_keeping(4, true, true, mean, shortest)}}) {
    SCOPED_TRACE(what);
    EXPECT_GT(run.saved_after_pass1, 0u);
    EXPECT_EQ(run.saved_after_step, 0u);
    ASSERT_EQ(run.gradients.size(), recomputed.gradients.size());
    for (std::size_t i = 0; i < run.gradients.size(); ++i)
      EXPECT_EQ(run.gradients[i], recomputed.gradients[i]) << "parameter " << i;
  }
}

TEST(KeptActivations, PassTwoOfAKeptOrOutOfOrderBatchIsAnError) {
  Network network = make_network({net::AggregatorKind::mean});
  const auto batches = make_batches(11, 4, 32, 3);
  TwoPassStep step(network.image_model(), {.backend = Backend::cpu});
  step.begin_image(11, 1, 0, 4);
  for (std::int64_t k = 0; k < 3; ++k) step.pass1_batch(batches[static_cast<std::size_t>(k)], 4 * k);
  step.finish_image(1.0f);
  EXPECT_THROW(step.pass2_batch(batches[1], 4), Error) << "the last batch comes first";
  EXPECT_THROW(step.backward_kept(), Error) << "pass 2 has not reached the kept batches";
  step.pass2_batch(batches[2], 8);
  step.pass2_batch(batches[1], 4);
  EXPECT_THROW(step.pass2_batch(batches[0], 0), Error) << "tiles [0, 4) were kept";
  step.backward_kept();
  EXPECT_EQ(network.model->encoder().saved_count(), 0u);
}

TEST(KeptActivations, AnAbandonedStepDropsWhatPass1Kept) {
  Network network = make_network({net::AggregatorKind::mean});
  const auto batches = make_batches(8, 4, 32, 3);
  TwoPassStep step(network.image_model(), {.backend = Backend::cpu});
  step.begin_image(8, 1, 0, 8);
  step.pass1_batch(batches[0], 0);
  EXPECT_GT(network.model->encoder().saved_count(), 0u);
  step.end_image();
  EXPECT_EQ(network.model->encoder().saved_count(), 0u);
}

TEST(KeptActivations, TopTilesAndTheInstanceVoteKeepNothing) {
  Network attention = make_network({net::AggregatorKind::attention, 16, true});
  TwoPassStep top(attention.image_model(), {.backend = Backend::cpu, .freeze_bn = true, .top_tiles = 2});
  EXPECT_THROW(top.begin_image(8, 1, 0, 4), Error);
  EXPECT_THROW(top.begin_image(8, 1, 0, 0, 1), Error);
  Network instance = make_network({net::AggregatorKind::instance});
  TwoPassStep vote(instance.image_model(), {.backend = Backend::cpu});
  EXPECT_THROW(vote.begin_image(8, 1, 0, 4), Error);
  EXPECT_THROW(vote.begin_image(8, 1, 0, 0, 1), Error);
}

}  // namespace
}  // namespace bigtrain
