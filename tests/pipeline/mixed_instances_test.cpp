// train.mix_tiles: the instance loss with tile batches drawn across the step's
// images. With frozen BatchNorm the gradients must be those of the unmixed one-pass
// step (the tiles need nothing of each other); with batch statistics those of one
// graph over the same batch, and of finite differences of the step's loss.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

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

namespace bigtrain {
namespace {

constexpr std::int64_t kClasses = 3;

struct Network {
  std::unique_ptr<net::Model> model;
  std::unique_ptr<net::Aggregator> aggregator;
  ImageModel image_model() { return {&model->encoder(), aggregator.get(), &model->head()}; }
};

Network make_network() {
  auto spec = net::model_spec_from_yaml_string(
      "preset: small\nin_channels: 1\nnum_classes: 3\nstem: {kernel: 5, stride: 2, maxpool: false}\nwidth: 0.125\n",
      "mixed_instances_test");
  Network network;
  network.model = std::make_unique<net::Model>(spec, 4321);
  network.aggregator = net::make_aggregator(net::AggregatorSpec{net::AggregatorKind::instance},
                                            network.model->encoder().feature_dim(), 7);
  return network;
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

// All tiles of the step in one batch (image order), BatchNorm with batch statistics:
// the step's loss sum_i scale / N_i sum_t CE(tile t of image i).
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

double one_graph_loss(Network& network, const std::vector<StepImage>& images, float scale, bool backward) {
  net::ForwardContext ctx{.backend = Backend::cpu, .training = true, .keep_activations = backward};
  ctx.update_bn_running_stats = false;
  Tensor logits = network.model->head().forward(network.model->encoder().forward(all_tiles(images), ctx), ctx);
  const std::int64_t rows = logits.dim(0);
  Tensor targets = Tensor::empty({rows}, DType::i32);
  std::vector<double> weight(static_cast<std::size_t>(rows));
  std::int64_t row = 0;
  for (const auto& image : images)
    for (std::int64_t t = 0; t < image.pixels.dim(0); ++t, ++row) {
      targets.data<std::int32_t>()[row] = image.label;
      weight[static_cast<std::size_t>(row)] = scale / static_cast<double>(image.pixels.dim(0));
    }
  double loss = 0.0;
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
  return loss;
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

TEST(MixedInstances, BatchStatisticsGradientsEqualOneGraphAndFiniteDifferences) {
  const auto images = make_images();
  const float scale = 0.5f;
  Network mixed_net = make_network(), reference_net = make_network();
  ImageModel mixed = mixed_net.image_model();
  mixed.zero_grad();
  // One batch holds all 15 tiles, so its statistics are the one graph's, whatever the order.
  MixedInstanceStep mixed_step(mixed, {.backend = Backend::cpu, .freeze_bn = false, .tile_batch = 64});
  add_images(mixed_step, images, 3);
  const auto results = mixed_step.train(scale, 5);
  ASSERT_EQ(results.size(), 3u);

  ImageModel reference = reference_net.image_model();
  reference.zero_grad();
  const double loss = one_graph_loss(reference_net, images, scale, true);
  expect_same_gradients(mixed, reference, 1e-5);
  double expected_loss = 0.0;  // the step's loss from the tiles' log-probabilities the votes kept
  for (std::size_t i = 0; i < images.size(); ++i)
    for (std::int64_t t = 0; t < images[i].pixels.dim(0); ++t)
      expected_loss -= scale / static_cast<double>(images[i].pixels.dim(0)) *
                       std::log(results[i].vote.tile_probability(t, images[i].label));
  EXPECT_NEAR(loss, expected_loss, 1e-5);

  // Central differences of the loss on a few weights of the stem and of the head.
  for (net::Parameter* p : {reference.parameters().front(), reference.parameters().back()}) {
    float* value = p->value.f32();
    const float* grad = mixed.parameters()[p == reference.parameters().front() ? 0 : mixed.parameters().size() - 1]
                            ->grad.f32();
    for (std::int64_t k = 0; k < std::min<std::int64_t>(p->value.numel(), 3); ++k) {
      const float saved = value[k], h = 1e-3f;  // larger steps cross ReLU kinks
      value[k] = saved + h;
      const double up = one_graph_loss(reference_net, images, scale, false);
      value[k] = saved - h;
      const double down = one_graph_loss(reference_net, images, scale, false);
      value[k] = saved;
      EXPECT_NEAR((up - down) / (2.0 * h), grad[k], 2e-3 + 2e-2 * std::abs(grad[k])) << p->name << "[" << k << "]";
    }
  }
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
