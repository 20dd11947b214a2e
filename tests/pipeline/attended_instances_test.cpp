// train.instance_loss: the two-pass step's gradients of the image loss plus CLAM's
// instance loss (the most attended tiles trained with the label through the head,
// the least attended towards uniform) against central differences of that total
// loss, computed here from plain forwards with the step's own selection.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/core/error.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/elementwise.hpp"
#include "net/aggregator.hpp"
#include "net/model.hpp"
#include "pipeline/engine/two_pass.hpp"
#include "tests/support/op_check.hpp"
#include "tests/support/small_image_network.hpp"

namespace bigtrain {
namespace {

constexpr std::int64_t kTiles = 9, kBatch = 4, kSize = 24, kInstances = 2;
constexpr int kLabel = 2;

using Network = testing::SmallImageNetwork;

Network make_network() {
  Network n = testing::make_small_image_network({net::AggregatorKind::attention, 8, true}, 0.125, 4321, 77,
                                                "attended_instances_test");
  // A fresh head says nearly nothing (logits ~0), which would hide the pull of the
  // least attended tiles towards uniform: a trained head's confidence makes it show.
  for (net::Parameter* p : n.model->head().parameters()) kernels::scale(Backend::cpu, 30.0f, p->value);
  return n;
}

std::vector<Tensor> make_batches() {
  std::vector<Tensor> batches;
  for (std::int64_t first = 0; first < kTiles; first += kBatch)
    batches.push_back(
        testing::random_tensor({std::min(kBatch, kTiles - first), 1, kSize, kSize}, 50 + static_cast<std::uint64_t>(first)));
  return batches;
}

// Gradients of one training step; returns the attention it selected by.
std::vector<float> step_gradients(Network& n, const std::vector<Tensor>& batches, float weight) {
  ImageModel model = n.image_model();
  model.zero_grad();
  TwoPassStep step(model, {.backend = Backend::cpu, .freeze_bn = true, .instance_k = kInstances,
                           .instance_weight = weight});
  step.begin_image(kTiles, kLabel, 0);
  std::int64_t first = 0;
  for (const auto& b : batches) {
    step.pass1_batch(b, first);
    first += b.dim(0);
  }
  step.finish_image(1.0f);
  const std::vector<float> attention = step.attention().to_vector();
  for (std::size_t k = batches.size(); k-- > 0;) step.pass2_batch(batches[k], static_cast<std::int64_t>(k) * kBatch);
  return attention;
}

double cross_entropy(const Tensor& logits, float smoothing) {
  Tensor targets = Tensor::empty({logits.dim(0)}, DType::i32);
  std::fill_n(targets.data<std::int32_t>(), logits.dim(0), kLabel);
  Tensor dlogits = Tensor::empty(logits.shape());
  kernels::CrossEntropyOptions ce;
  ce.label_smoothing = smoothing;
  return kernels::cross_entropy(Backend::cpu, logits, targets, nullptr, ce, dlogits);
}

// The loss the step differentiates, from forwards alone (frozen statistics).
double total_loss(Network& n, const std::vector<Tensor>& batches, const std::vector<std::int64_t>& top,
                  const std::vector<std::int64_t>& bottom, double weight) {
  const net::ForwardContext ctx = net::ForwardContext::inference(Backend::cpu);
  Tensor h = Tensor::empty({kTiles, n.model->encoder().feature_dim()});
  std::int64_t row = 0;
  for (const auto& b : batches) {
    h.slice_rows(row, row + b.dim(0)).copy_from(n.model->encoder().forward(b, ctx));
    row += b.dim(0);
  }
  auto rows = [&](const std::vector<std::int64_t>& which) {
    Tensor out = Tensor::empty({static_cast<std::int64_t>(which.size()), h.dim(1)});
    for (std::size_t r = 0; r < which.size(); ++r)
      out.slice_rows(static_cast<std::int64_t>(r), static_cast<std::int64_t>(r) + 1).copy_from(h.slice_rows(which[r], which[r] + 1));
    return out;
  };
  const double image = cross_entropy(n.model->head().forward(n.aggregator->forward(h, ctx), ctx), 0.0f);
  const double attended = cross_entropy(n.model->head().forward(rows(top), ctx), 0.0f);
  const double ignored = cross_entropy(n.model->head().forward(rows(bottom), ctx), 1.0f);
  return image + weight * 0.5 * (attended + ignored);
}

TEST(AttendedInstances, GradientsAreThoseOfImageLossPlusInstanceLoss) {
  const auto batches = make_batches();
  const float weight = 0.6f;
  Network n = make_network();
  const std::vector<float> attention = step_gradients(n, batches, weight);
  ASSERT_EQ(attention.size(), static_cast<std::size_t>(kTiles));
  std::vector<std::int64_t> order(kTiles);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto x, auto y) { return attention[x] > attention[y]; });
  const std::vector<std::int64_t> top(order.begin(), order.begin() + kInstances);
  const std::vector<std::int64_t> bottom(order.rbegin(), order.rbegin() + kInstances);

  // Central differences on entries of the stem, the attention and the head.
  int checked = 0;
  for (net::Parameter* p : n.image_model().parameters()) {
    if (p->value.rank() < 2) continue;
    for (std::int64_t i : {std::int64_t{0}, p->value.numel() / 2, p->value.numel() - 1}) {
      float* value = p->value.f32() + i;
      const float saved = *value, eps = 1e-3f;
      *value = saved + eps;
      const double up = total_loss(n, batches, top, bottom, weight);
      *value = saved - eps;
      const double down = total_loss(n, batches, top, bottom, weight);
      *value = saved;
      const double numeric = (up - down) / (2.0 * eps), analytic = p->grad.f32()[i];
      EXPECT_NEAR(analytic, numeric, 2e-3 + 0.03 * std::abs(numeric)) << p->name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(AttendedInstances, ChangeTheGradientsAndVanishAtWeightZero) {
  const auto batches = make_batches();
  Network with = make_network(), without = make_network(), zero = make_network();
  step_gradients(with, batches, 0.6f);
  ImageModel plain = without.image_model();
  plain.zero_grad();
  {
    TwoPassStep step(plain, {.backend = Backend::cpu, .freeze_bn = true});
    step.begin_image(kTiles, kLabel, 0);
    for (std::size_t k = 0; k < batches.size(); ++k) step.pass1_batch(batches[k], static_cast<std::int64_t>(k) * kBatch);
    step.finish_image(1.0f);
    for (std::size_t k = batches.size(); k-- > 0;) step.pass2_batch(batches[k], static_cast<std::int64_t>(k) * kBatch);
  }
  step_gradients(zero, batches, 0.0f);
  const auto a = with.image_model().parameters(), b = without.image_model().parameters(),
             c = zero.image_model().parameters();
  double largest_change = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto ga = testing::to_doubles(a[i]->grad), gb = testing::to_doubles(b[i]->grad),
               gc = testing::to_doubles(c[i]->grad);
    for (std::size_t j = 0; j < ga.size(); ++j) {
      largest_change = std::max(largest_change, std::abs(ga[j] - gb[j]));
      ASSERT_EQ(gc[j], gb[j]) << a[i]->name << ": weight 0 is the plain step";
    }
  }
  EXPECT_GT(largest_change, 1e-3) << "the instance loss reaches the parameters";
}

TEST(AttendedInstances, NeedAttention) {
  Network n = make_network();
  n.aggregator = net::make_aggregator({net::AggregatorKind::mean, 8, true}, n.model->encoder().feature_dim(), 1);
  EXPECT_THROW(TwoPassStep(n.image_model(), {.backend = Backend::cpu, .instance_k = 2, .instance_weight = 0.3f}),
               Error);
}

}  // namespace
}  // namespace bigtrain
