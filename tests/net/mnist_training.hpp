#pragma once
// A plain supervised training loop over the cached MNIST digits: shuffled mini-batches
// (seeded), forward, softmax cross-entropy, backward, optimizer step with a schedule.
// Used by the learning test and the determinism test.
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

#include "kernels/cross_entropy.hpp"
#include "net/grad_clip.hpp"
#include "net/lr_schedule.hpp"
#include "net/model.hpp"
#include "net/optimizer.hpp"
#include "tests/net/mnist_data.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::testing {

struct MnistTrainOptions {
  std::uint64_t seed = 0;  // initial weights and batch order
  std::int64_t first = 0, count = 8000;  // the training digits: [first, first + count)
  int epochs = 1;
  std::int64_t batch = 64;
  std::int64_t max_steps = -1;  // stop early (determinism test); -1: all epochs
  net::OptimizerConfig optimizer;
  net::LrScheduleConfig schedule;
  double clip_grad_norm = 0.0;  // 0: off
  Backend backend = Backend::cpu;
};

// The small encoder with a 10-class head; `width` scales every channel count.
inline net::ModelSpec mnist_model_spec(double width) {
  net::ModelSpec spec;
  spec.encoder = net::EncoderSpec::preset_spec("small");
  spec.encoder.in_channels = 1;
  spec.encoder.width = width;
  spec.num_classes = 10;
  return spec;
}

// The first `count` indices from `first`, in a seeded pseudo-random order (Fisher-Yates
// with splitmix64, so the order is the same with every standard library).
inline std::vector<std::int64_t> shuffled_indices(std::int64_t first, std::int64_t count, std::uint64_t seed) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(count));
  std::iota(order.begin(), order.end(), first);
  Random random(seed);
  for (std::size_t i = order.size(); i-- > 1;) std::swap(order[i], order[random.next_u64() % (i + 1)]);
  return order;
}

// Trains `model`; returns the mean training loss of each epoch (or of the steps run).
inline std::vector<double> train_mnist(net::Model& model, const MnistDigits& digits, const MnistTrainOptions& options) {
  auto optimizer = net::make_optimizer(options.optimizer, model.parameters(), options.backend);
  optimizer->set_schedule(net::LrSchedule(options.schedule));
  const auto ctx = net::ForwardContext::train(options.backend);
  std::vector<double> epoch_losses;
  std::int64_t steps = 0;
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    const auto order = shuffled_indices(options.first, options.count, options.seed * 1000003u + epoch);
    double loss_sum = 0.0;
    std::int64_t batches = 0;
    // The last partial batch is dropped: a batch of one would make BatchNorm degenerate.
    for (std::int64_t start = 0; start + options.batch <= options.count; start += options.batch) {
      if (options.max_steps >= 0 && steps == options.max_steps) break;
      const std::vector<std::int64_t> indices(order.begin() + start, order.begin() + start + options.batch);
      auto [images, labels] = mnist_batch(digits, indices);
      images = on_backend(images, options.backend);
      labels = on_backend(labels, options.backend);
      optimizer->zero_grad();
      const Tensor logits = model.forward(images, ctx);
      Tensor dlogits = Tensor::empty(logits.shape(), DType::f32, logits.device());
      loss_sum += kernels::cross_entropy(options.backend, logits, labels, nullptr, {}, dlogits);
      model.backward(dlogits);
      if (options.clip_grad_norm > 0.0)
        net::clip_grad_norm(options.backend, model.parameters(), {.max_norm = options.clip_grad_norm});
      optimizer->step();
      ++batches;
      ++steps;
    }
    if (batches > 0) epoch_losses.push_back(loss_sum / static_cast<double>(batches));
    if (options.max_steps >= 0 && steps == options.max_steps) break;
  }
  return epoch_losses;
}

// Fraction of digits [first, first + count) the model classifies correctly (inference mode).
inline double mnist_accuracy(net::Model& model, const MnistDigits& digits, std::int64_t first, std::int64_t count,
                             Backend backend = Backend::cpu) {
  constexpr std::int64_t kBatch = 500;
  std::int64_t correct = 0;
  for (std::int64_t start = first; start < first + count; start += kBatch) {
    const std::int64_t n = std::min(kBatch, first + count - start);
    std::vector<std::int64_t> indices(static_cast<std::size_t>(n));
    std::iota(indices.begin(), indices.end(), start);
    auto [images, labels] = mnist_batch(digits, indices);
    const std::vector<float> logits =
        model.forward(on_backend(images, backend), net::ForwardContext::inference(backend)).to_vector();
    for (std::int64_t i = 0; i < n; ++i) {
      const auto row = logits.begin() + i * 10;
      const auto predicted = std::max_element(row, row + 10) - row;
      correct += predicted == labels.data<std::int32_t>()[i];
    }
  }
  return static_cast<double>(correct) / static_cast<double>(count);
}

}  // namespace bigtrain::testing
