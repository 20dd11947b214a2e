// train.mix_tiles: the instance loss with tile batches drawn across the step's
// images. With frozen BatchNorm the gradients must be those of the unmixed one-pass
// step (the tiles need nothing of each other); with batch statistics those of one
// graph over the same batch, and of finite differences of the step's loss.
#include <gtest/gtest.h>

#include <map>

#include <cmath>
#include <memory>
#include <set>

#include "kernels/core/error.hpp"
#include "kernels/cross_entropy.hpp"
#include "net/aggregator.hpp"
#include "net/model.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/engine/mixed_instances.hpp"
#include "pipeline/engine/two_pass.hpp"
#include "tests/support/error_of.hpp"
#include "tests/support/op_check.hpp"
#include "tests/support/relative_error.hpp"
#include "tests/support/small_image_network.hpp"

namespace bigtrain {
namespace {

constexpr std::int64_t kClasses = 3;

using Network = testing::SmallImageNetwork;

Network make_network() {
  return testing::make_small_image_network(net::AggregatorSpec{net::AggregatorKind::instance}, 0.125, 4321, 7,
                                           "mixed_instances_test");
}

struct StepImage {
  int label;
  Tensor pixels;  // [tiles, 1, 24, 24]
};

std::vector<StepImage> make_images() {
  return {{0, testing::random_tensor({5, 1, 24, 24}, 11)},
          {2, testing::random_tensor({3, 1, 24, 24}, 12)},
          {1, testing::random_tensor({7, 1, 24, 24}, 13)}};
}

// Eight images of two or three tiles: the deal's batches hold eight, four and
// eight tiles, enough for BatchNorm's statistics to stay smooth under a step.
std::vector<StepImage> make_many_images() {
  std::vector<StepImage> images;
  for (int i = 0; i < 8; ++i)
    images.push_back({i % 3, testing::random_tensor({2 + i % 2, 1, 24, 24}, 20 + static_cast<std::uint64_t>(i))});
  return images;
}

// Feeds the images in tile batches of `batch`, as the tile stream would.
void add_images(MixedInstanceStep& step, const std::vector<StepImage>& images, std::int64_t batch) {
  for (std::size_t i = 0; i < images.size(); ++i) {
    const std::int64_t tiles = images[i].pixels.dim(0);
    for (std::int64_t first = 0; first < tiles; first += batch) {
      EXPECT_FALSE(step.complete() && first > 0);
      step.add(i, images[i].label, tiles, nullptr,
               images[i].pixels.slice_rows(first, std::min(tiles, first + batch)).clone(), first);
    }
  }
}

using testing::relative_error;

void expect_same_gradients(const ImageModel& actual, const ImageModel& expected, double tolerance) {
  const auto a = actual.parameters(), e = expected.parameters();
  ASSERT_EQ(a.size(), e.size());
  std::size_t compared = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!e[i]->grad.defined()) continue;  // the instance aggregator has no parameters
    ASSERT_TRUE(a[i]->grad.defined()) << a[i]->name;
    EXPECT_LT(relative_error(a[i]->grad, e[i]->grad), tolerance) << a[i]->name;
    ++compared;
  }
  EXPECT_GT(compared, 4u);
}

using Batches = std::vector<std::vector<std::pair<std::size_t, std::int64_t>>>;

// The step's loss sum_i scale / N_i sum_t CE(tile t of image i), BatchNorm with the
// batch statistics of `batches` (one graph each; backward accumulates). batch_mean:
// each batch's loss is instead scale times the mean over its tiles.
double batched_loss(Network& network, const std::vector<StepImage>& images, float scale, bool backward,
                    const Batches& batches, bool batch_mean = false) {
  double loss = 0.0;
  for (const auto& batch : batches) {
    const auto rows = static_cast<std::int64_t>(batch.size());
    Tensor x = Tensor::empty({rows, 1, 24, 24});
    Tensor targets = Tensor::empty({rows}, DType::i32);
    std::vector<double> weight(batch.size());
    for (std::int64_t r = 0; r < rows; ++r) {
      const auto [i, t] = batch[static_cast<std::size_t>(r)];
      x.slice_rows(r, r + 1).copy_from(images[i].pixels.slice_rows(t, t + 1));
      targets.data<std::int32_t>()[r] = images[i].label;
      weight[static_cast<std::size_t>(r)] =
          scale / static_cast<double>(batch_mean ? rows : images[i].pixels.dim(0));
    }
    net::ForwardContext ctx{.backend = Backend::cpu, .training = true, .keep_activations = backward};
    ctx.update_bn_running_stats = false;
    Tensor logits = network.model->head().forward(network.model->encoder().forward(x, ctx), ctx);
    const auto l = logits.to_vector();
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* z = l.data() + r * kClasses;
      double top = std::max({z[0], z[1], z[2]}), sum = 0.0;
      for (int k = 0; k < kClasses; ++k) sum += std::exp(z[k] - top);
      loss += weight[static_cast<std::size_t>(r)] * (top + std::log(sum) - z[targets.data<std::int32_t>()[r]]);
    }
    if (backward) {
      Tensor dlogits = Tensor::empty(logits.shape());
      kernels::cross_entropy(Backend::cpu, logits, targets, nullptr, {}, dlogits);
      for (std::int64_t r = 0; r < rows; ++r)
        for (int k = 0; k < kClasses; ++k)
          dlogits.data<float>()[r * kClasses + k] *= static_cast<float>(weight[static_cast<std::size_t>(r)] * rows);
      network.model->encoder().backward(network.model->head().backward(dlogits));
    }
  }
  return loss;
}

// Every tile of the step in image order.
Tensor all_tiles(const std::vector<StepImage>& images) {
  std::int64_t total = 0;
  for (const auto& image : images) total += image.pixels.dim(0);
  Tensor x = Tensor::empty({total, 1, 24, 24});
  std::int64_t row = 0;
  for (const auto& image : images) {
    x.slice_rows(row, row + image.pixels.dim(0)).copy_from(image.pixels);
    row += image.pixels.dim(0);
  }
  return x;
}

std::vector<std::int64_t> tile_counts(const std::vector<StepImage>& images) {
  std::vector<std::int64_t> counts;
  for (const auto& image : images) counts.push_back(image.pixels.dim(0));
  return counts;
}

TEST(MixedInstances, FrozenBatchNormGradientsEqualTheUnmixedStep) {
  const auto images = make_images();
  const float scale = 1.0f / 3.0f;  // images_per_step 3
  Network mixed_net = make_network(), unmixed_net = make_network();

  ImageModel unmixed = unmixed_net.image_model();
  unmixed.zero_grad();
  TwoPassStep step(unmixed, {.backend = Backend::cpu, .freeze_bn = true});
  std::vector<ImageOutcome> expected;
  for (const auto& image : images) {
    const std::int64_t tiles = image.pixels.dim(0);
    step.begin_image(tiles, image.label, 0);
    for (std::int64_t first = 0; first < tiles; first += 2)
      step.train_instances_batch(image.pixels.slice_rows(first, std::min(tiles, first + 2)), first, scale);
    expected.push_back(step.finish_image(scale));
    step.end_image();
  }

  ImageModel mixed = mixed_net.image_model();
  mixed.zero_grad();
  MixedInstanceStep mixed_step(mixed, {.backend = Backend::cpu, .freeze_bn = true, .tile_batch = 4});
  add_images(mixed_step, images, 2);
  ASSERT_TRUE(mixed_step.complete());
  ASSERT_EQ(mixed_step.images(), 3u);
  const auto results = mixed_step.train(scale, 99);
  EXPECT_EQ(mixed_step.images(), 0u) << "a step forgets its images";
  EXPECT_EQ(mixed.encoder->saved_count(), 0u) << "each batch frees its activations";
  expect_same_gradients(mixed, unmixed, 1e-5);
  ASSERT_EQ(results.size(), images.size());
  for (std::size_t i = 0; i < images.size(); ++i) {
    EXPECT_EQ(results[i].image, i);
    EXPECT_EQ(results[i].label, images[i].label);
    EXPECT_NEAR(results[i].vote.outcome.loss, expected[i].loss, 1e-5);
    ASSERT_EQ(results[i].vote.outcome.probabilities.size(), static_cast<std::size_t>(kClasses));
    for (std::size_t k = 0; k < 3; ++k)
      EXPECT_NEAR(results[i].vote.outcome.probabilities[k], expected[i].probabilities[k], 1e-5);
    EXPECT_EQ(results[i].vote.outcome.tiles, images[i].pixels.dim(0));
  }
}

TEST(MixedInstances, BatchStatisticsGradientsEqualOneGraphPerBatchAndFiniteDifferences) {
  const auto images = make_many_images();
  const float scale = 0.5f;
  Network mixed_net = make_network(), reference_net = make_network();
  ImageModel mixed = mixed_net.image_model();
  mixed.zero_grad();
  MixedInstanceStep mixed_step(mixed, {.backend = Backend::cpu, .freeze_bn = false, .tile_batch = 64});
  add_images(mixed_step, images, 3);
  const auto results = mixed_step.train(scale, 5);
  // The step's batches, rebuilt from the same seed: one tile of each image a batch.
  const Batches batches = distinct_image_batches(tile_counts(images), 64, 5);
  ASSERT_EQ(results.size(), images.size());

  ImageModel reference = reference_net.image_model();
  reference.zero_grad();
  const double loss = batched_loss(reference_net, images, scale, true, batches);
  expect_same_gradients(mixed, reference, 1e-5);
  double expected_loss = 0.0;  // the step's loss from the tiles' log-probabilities the votes kept
  for (std::size_t i = 0; i < images.size(); ++i)
    for (std::int64_t t = 0; t < images[i].pixels.dim(0); ++t)
      expected_loss -= scale / static_cast<double>(images[i].pixels.dim(0)) *
                       std::log(results[i].vote.tile_probability(t, images[i].label));
  EXPECT_NEAR(loss, expected_loss, 1e-5);

  // Central differences of the loss on a few weights of the stem and of the head.
  // This network is small enough that a stem step of 1e-3 moves some ReLU input
  // across zero for about half the weights; the stencil then straddles a kink and
  // the gradient (the derivative on one side) equals one of the one-sided
  // differences instead of the central one (measured: e.g. one-sided -0.0377 and
  // -0.0512 around a gradient of -0.0375).
  const double base = batched_loss(reference_net, images, scale, false, batches);
  for (net::Parameter* p : {reference.parameters().front(), reference.parameters().back()}) {
    float* value = p->value.f32();
    const float* grad = mixed.parameters()[p == reference.parameters().front() ? 0 : mixed.parameters().size() - 1]
                            ->grad.f32();
    for (std::int64_t k = 0; k < std::min<std::int64_t>(p->value.numel(), 8); ++k) {
      const float saved = value[k], h = 1e-3f;
      value[k] = saved + h;
      const double up = batched_loss(reference_net, images, scale, false, batches);
      value[k] = saved - h;
      const double down = batched_loss(reference_net, images, scale, false, batches);
      value[k] = saved;
      const double g = grad[k], tolerance = 2e-3 + 2e-2 * std::abs(g);
      const double central = (up - down) / (2.0 * h), forward = (up - base) / h, backward = (base - down) / h;
      const bool agrees = std::abs(central - g) <= tolerance || std::abs(forward - g) <= 2.0 * tolerance ||
                          std::abs(backward - g) <= 2.0 * tolerance;
      EXPECT_TRUE(agrees) << p->name << "[" << k << "]: gradient " << g << ", differences " << backward << " (left) "
                          << central << " (central) " << forward << " (right)";
    }
  }
}

// train.step_every_batch: the callback comes after each batch's backward, with that
// batch's gradients alone (the callback zeroes them, as an optimizer step does), and
// they are those of the batch's mean loss in one graph.
TEST(MixedInstances, StepEveryBatchGivesEachBatchItsOwnMeanLoss) {
  const auto images = make_many_images();
  const float scale = 2.0f;
  Network mixed_net = make_network(), reference_net = make_network();
  ImageModel mixed = mixed_net.image_model();
  mixed.zero_grad();
  MixedInstanceStep mixed_step(mixed, {.backend = Backend::cpu, .freeze_bn = false, .tile_batch = 4});
  add_images(mixed_step, images, 3);
  std::vector<std::vector<std::vector<float>>> per_batch;  // [batch][parameter] gradient
  const auto results = mixed_step.train(scale, 8, [&] {
    std::vector<std::vector<float>> grads;
    for (net::Parameter* p : mixed.parameters()) grads.push_back(p->grad.defined() ? p->grad.to_vector() : std::vector<float>{});
    per_batch.push_back(std::move(grads));
    mixed.zero_grad();
  });
  ASSERT_EQ(results.size(), images.size());
  const Batches batches = distinct_image_batches(tile_counts(images), 4, 8);
  ASSERT_GT(batches.size(), 3u);
  ASSERT_EQ(per_batch.size(), batches.size()) << "one callback a batch";
  ImageModel reference = reference_net.image_model();
  for (std::size_t b = 0; b < batches.size(); ++b) {
    reference.zero_grad();
    batched_loss(reference_net, images, scale, true, {batches[b]}, true);
    const auto params = reference.parameters();
    std::size_t compared = 0;
    for (std::size_t k = 0; k < params.size(); ++k) {
      if (!params[k]->grad.defined() || per_batch[b][k].empty()) continue;
      const Tensor actual = Tensor::from_vector(params[k]->grad.shape(), per_batch[b][k]);
      EXPECT_LT(relative_error(actual, params[k]->grad), 1e-5) << "batch " << b << ", " << params[k]->name;
      ++compared;
    }
    EXPECT_GT(compared, 4u);
  }
}

// A frozen encoder (a linear probe) skips its backward: the head's gradients are the
// full step's, the encoder's parameters get none.
TEST(MixedInstances, AFrozenEncoderSkipsItsBackwardAndTheHeadsGradientsStay) {
  const auto images = make_many_images();
  auto gradients = [&](bool train_encoder) {
    Network network = make_network();
    ImageModel model = network.image_model();
    model.zero_grad();
    MixedInstanceStep step(model, {.backend = Backend::cpu, .freeze_bn = false, .tile_batch = 4,
                                   .train_encoder = train_encoder});
    add_images(step, images, 3);
    const auto results = step.train(1.0f, 8);
    EXPECT_EQ(results.size(), images.size());
    std::map<std::string, Tensor> grads;
    for (net::Parameter* p : model.parameters())
      if (p->grad.defined()) grads[p->name] = p->grad.clone();
    std::set<std::string> encoder;
    for (net::Parameter* p : network.model->encoder().parameters()) encoder.insert(p->name);
    return std::pair{grads, encoder};
  };
  const auto [whole, encoder] = gradients(true);
  const auto [probe, same_encoder] = gradients(false);
  std::size_t heads = 0, encoders = 0;
  for (const auto& [name, grad] : whole) {
    const auto it = probe.find(name);
    if (encoder.contains(name)) {
      ++encoders;
      if (it == probe.end()) continue;
      for (float g : it->second.to_vector()) ASSERT_EQ(g, 0.0f) << name << ": a frozen encoder's parameter got a gradient";
    } else {
      ASSERT_NE(it, probe.end()) << name;
      EXPECT_LT(relative_error(it->second, grad), 1e-6) << name << ": the head's gradient changed";
      ++heads;
    }
  }
  EXPECT_GT(heads, 0u);
  EXPECT_GT(encoders, 4u) << "the full step's encoder has gradients";
}

TEST(MixedInstances, TheShuffleSeedDecidesWhichTilesShareABatch) {
  const auto images = make_images();
  auto gradients_with_seed = [&](std::uint64_t seed) {
    Network network = make_network();
    ImageModel model = network.image_model();
    model.zero_grad();
    MixedInstanceStep step(model, {.backend = Backend::cpu, .freeze_bn = false, .tile_batch = 4});
    add_images(step, images, 4);
    step.train(1.0f, seed);
    return model.parameters().front()->grad.to_vector();
  };
  EXPECT_EQ(gradients_with_seed(3), gradients_with_seed(3)) << "deterministic for a seed";
  // Batch statistics depend on which images' tiles share a batch.
  EXPECT_NE(gradients_with_seed(3), gradients_with_seed(4));
}

// The batches a step deals: every tile once, never two tiles of one image in a
// batch (their shared batch statistics let the network fit each image's label
// through them), full while enough images have tiles, and a seed's own order.
TEST(MixedInstances, BatchesHoldOneTileOfAnImageAndEveryTileOnce) {
  const std::vector<std::int64_t> counts{5, 1, 7, 3, 7, 2};
  const Batches batches = distinct_image_batches(counts, 4, 11);
  std::set<std::pair<std::size_t, std::int64_t>> seen;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    std::set<std::size_t> images;
    for (const auto& [image, tile] : batches[b]) {
      EXPECT_TRUE(images.insert(image).second) << "image " << image << " twice in batch " << b;
      EXPECT_TRUE(tile >= 0 && tile < counts[image]);
      EXPECT_TRUE(seen.insert({image, tile}).second) << "tile " << tile << " of image " << image << " dealt twice";
    }
    EXPECT_LE(batches[b].size(), 4u);
  }
  EXPECT_EQ(seen.size(), 25u) << "every tile once";
  // 25 tiles, at most 4 a batch: the largest-first deal fills the first five batches.
  for (std::size_t b = 0; b < 5; ++b) EXPECT_EQ(batches[b].size(), 4u) << "batch " << b;
  EXPECT_EQ(distinct_image_batches(counts, 4, 11), batches) << "deterministic for a seed";
  EXPECT_NE(distinct_image_batches(counts, 4, 12), batches);
}

// train.instance_top_k with frozen BatchNorm (tiles independent): the gradients
// equal one graph over every tile whose rows are, per image, the label's
// cross-entropy on the K tiles likeliest to show it (half the image's weight) and
// the uniform distribution's on the others (the other half), the K found by an
// evaluation-mode forward of their own.
TEST(MixedInstances, TopKTrainsTheLikeliestTilesWithTheLabelAndTheRestTowardsUniform) {
  const auto images = make_images();
  const float scale = 0.5f;
  const std::int64_t k = 2;
  Network mixed_net = make_network(), reference_net = make_network();
  ImageModel mixed = mixed_net.image_model();
  mixed.zero_grad();
  MixedInstanceStep mixed_step(mixed, {.backend = Backend::cpu, .freeze_bn = true, .tile_batch = 4, .top_k = k});
  add_images(mixed_step, images, 3);
  const auto results = mixed_step.train(scale, 8);

  ImageModel reference = reference_net.image_model();
  reference.zero_grad();
  const Tensor x = all_tiles(images);
  const std::int64_t rows = x.dim(0);
  auto log_softmax = [](const float* z) {
    const double top = *std::max_element(z, z + kClasses);
    double sum = 0.0;
    for (int c = 0; c < kClasses; ++c) sum += std::exp(z[c] - top);
    std::vector<double> out(kClasses);
    for (int c = 0; c < kClasses; ++c) out[static_cast<std::size_t>(c)] = z[c] - top - std::log(sum);
    return out;
  };
  const net::ForwardContext eval = net::ForwardContext::inference(Backend::cpu);
  const Tensor scores = reference.head->forward(reference.encoder->forward(x, eval), eval);
  net::ForwardContext train{.backend = Backend::cpu, .training = true, .keep_activations = true, .freeze_bn = true};
  const Tensor logits = reference.head->forward(reference.encoder->forward(x, train), train);
  Tensor dlogits = Tensor::zeros(logits.shape());
  std::int64_t row = 0;
  for (std::size_t i = 0; i < images.size(); ++i) {
    const std::int64_t tiles = images[i].pixels.dim(0);
    std::vector<std::pair<double, std::int64_t>> ranked;  // (-log p(label), tile): ascending = likeliest first
    for (std::int64_t t = 0; t < tiles; ++t)
      ranked.emplace_back(-log_softmax(scores.data<float>() + (row + t) * kClasses)[static_cast<std::size_t>(images[i].label)], t);
    std::sort(ranked.begin(), ranked.end());
    std::vector<std::int64_t> selected;
    for (std::int64_t j = 0; j < k; ++j) selected.push_back(ranked[static_cast<std::size_t>(j)].second);
    std::sort(selected.begin(), selected.end());
    EXPECT_EQ(results[i].selected, selected) << "image " << i;
    for (std::int64_t t = 0; t < tiles; ++t) {
      const std::vector<double> lp = log_softmax(logits.data<float>() + (row + t) * kClasses);
      const bool chosen = std::find(selected.begin(), selected.end(), t) != selected.end();
      const double weight = scale * 0.5 / static_cast<double>(chosen ? k : tiles - k);
      for (int c = 0; c < kClasses; ++c) {
        const double target = chosen ? (c == images[i].label ? 1.0 : 0.0) : 1.0 / kClasses;
        dlogits.data<float>()[(row + t) * kClasses + c] =
            static_cast<float>(weight * (std::exp(lp[static_cast<std::size_t>(c)]) - target));
      }
    }
    row += tiles;
  }
  ASSERT_EQ(row, rows);
  reference.encoder->backward(reference.head->backward(dlogits));
  expect_same_gradients(mixed, reference, 1e-5);

  // Every tile selected: the plain instance step.
  Network all_net = make_network(), plain_net = make_network();
  ImageModel all = all_net.image_model(), plain = plain_net.image_model();
  all.zero_grad();
  plain.zero_grad();
  MixedInstanceStep all_step(all, {.backend = Backend::cpu, .freeze_bn = true, .tile_batch = 4, .top_k = 100});
  MixedInstanceStep plain_step(plain, {.backend = Backend::cpu, .freeze_bn = true, .tile_batch = 4});
  add_images(all_step, images, 3);
  add_images(plain_step, images, 3);
  all_step.train(scale, 8);
  plain_step.train(scale, 8);
  expect_same_gradients(all, plain, 1e-6);

  EXPECT_NE(testing::error_of([] {
              parse_config("data: {train: a.csv}\naggregator: {kind: instance}\ntrain: {instance_top_k: 4}\n", "k.yaml");
            }).find("needs mix_tiles: true"),
            std::string::npos);
}

TEST(MixedInstances, RejectsPooledAggregatorsAndIncompleteSteps) {
  Network network = make_network();
  auto attention = net::make_aggregator(net::AggregatorSpec{net::AggregatorKind::attention},
                                        network.model->encoder().feature_dim(), 3);
  ImageModel pooled{&network.model->encoder(), attention.get(), &network.model->head()};
  EXPECT_NE(testing::error_of([&] { MixedInstanceStep step(pooled, {}); }).find("aggregator.kind instance"), std::string::npos);

  MixedInstanceStep step(network.image_model(), {});
  step.add(0, 1, 4, nullptr, testing::random_tensor({2, 1, 24, 24}, 1), 0);
  EXPECT_FALSE(step.complete());
  EXPECT_NE(testing::error_of([&] { step.train(1.0f, 0); }).find("before every image's tiles arrived"), std::string::npos);
  EXPECT_NE(testing::error_of([&] { step.add(0, 1, 4, nullptr, testing::random_tensor({3, 1, 24, 24}, 1), 2); })
                .find("outside its 4 tiles"),
            std::string::npos);
}

TEST(MixedInstances, ConfigNeedsTheInstanceAggregator) {
  const std::string message = testing::error_of([] {
    parse_config("data: {train: a.csv}\naggregator: {kind: attention}\ntrain: {mix_tiles: true}\n", "mix.yaml");
  });
  EXPECT_NE(message.find("mix.yaml"), std::string::npos) << message;
  EXPECT_NE(message.find("mix_tiles"), std::string::npos) << message;
  const Config ok =
      parse_config("data: {train: a.csv}\naggregator: {kind: instance}\ntrain: {mix_tiles: true}\n", "mix.yaml");
  EXPECT_TRUE(ok.train.mix_tiles);
  // The resize baseline is one tile an image: mixing makes it plain minibatch training.
  EXPECT_TRUE(parse_config("data: {train: a.csv}\ntiler: {mode: resize}\naggregator: {kind: instance}\n"
                           "train: {mix_tiles: true}\n",
                           "mix.yaml")
                  .train.mix_tiles);
}

}  // namespace
}  // namespace bigtrain
