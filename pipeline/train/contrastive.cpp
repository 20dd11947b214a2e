#include "pipeline/train/contrastive.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <vector>

#include <fmt/format.h>
#include <opencv2/imgproc.hpp>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "net/linear.hpp"
#include "net/relu.hpp"
#include "net/sequential.hpp"
#include "pipeline/data/image_tiling.hpp"
#include "pipeline/data/preprocess.hpp"
#include "pipeline/data/tile_stream.hpp"
#include "pipeline/train/pretext_common.hpp"

namespace bigtrain {
namespace {

enum ContrastStream : std::uint64_t { kOrder = 1, kSubsample = 2, kAugment = 3, kShuffle = 4, kViews = 5, kHead = 6 };

// SimCLR's projection: Linear, ReLU, Linear, on the encoder's pooled features.
std::unique_ptr<net::Sequential> make_projection(std::int64_t features, std::int64_t out, std::uint64_t seed) {
  auto projection = std::make_unique<net::Sequential>("projection");
  projection->add(std::make_unique<net::Linear>("projection.0", features, features, mix_seed(seed, 0)));
  projection->add(std::make_unique<net::ReLU>("projection.1"));
  projection->add(std::make_unique<net::Linear>("projection.2", features, out, mix_seed(seed, 2)));
  return projection;
}

}  // namespace

NtXentResult nt_xent(const Tensor& projections, double temperature, Tensor* dprojections) {
  BT_CHECK(projections.device().is_cpu() && projections.dtype() == DType::f32 && projections.rank() == 2,
           "NT-Xent: projections must be host float32 [2N, d], got {}", projections.describe());
  const std::int64_t rows = projections.dim(0), dim = projections.dim(1);
  BT_CHECK(rows >= 2 && rows % 2 == 0, "NT-Xent: {} views; they come in twins, at least one pair", rows);
  BT_CHECK(temperature > 0.0, "NT-Xent: temperature must be positive, got {}", temperature);
  const std::int64_t half = rows / 2;
  const float* h = projections.data<float>();
  std::vector<double> z(static_cast<std::size_t>(rows * dim)), norm(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < rows; ++i) {
    double sum = 0.0;
    for (std::int64_t k = 0; k < dim; ++k) sum += static_cast<double>(h[i * dim + k]) * h[i * dim + k];
    norm[static_cast<std::size_t>(i)] = std::max(std::sqrt(sum), 1e-12);
    for (std::int64_t k = 0; k < dim; ++k)
      z[static_cast<std::size_t>(i * dim + k)] = h[i * dim + k] / norm[static_cast<std::size_t>(i)];
  }
  auto twin = [&](std::int64_t i) { return i < half ? i + half : i - half; };
  // g[i][j]: d(mean loss) / d(similarity s_ij), s_ij = z_i . z_j / temperature.
  std::vector<double> g(static_cast<std::size_t>(rows * rows), 0.0), s(static_cast<std::size_t>(rows * rows));
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < rows; ++j) {
      double dot = 0.0;
      for (std::int64_t k = 0; k < dim; ++k) dot += z[static_cast<std::size_t>(i * dim + k)] * z[static_cast<std::size_t>(j * dim + k)];
      s[static_cast<std::size_t>(i * rows + j)] = dot / temperature;
    }
  NtXentResult result;
  for (std::int64_t i = 0; i < rows; ++i) {
    const double* row = s.data() + i * rows;
    double top = -INFINITY;
    std::int64_t best = -1;
    for (std::int64_t j = 0; j < rows; ++j)
      if (j != i && row[j] > top) top = row[j], best = j;
    double sum = 0.0;
    for (std::int64_t j = 0; j < rows; ++j)
      if (j != i) sum += std::exp(row[j] - top);
    result.loss += top + std::log(sum) - row[twin(i)];
    if (best == twin(i)) result.accuracy += 1.0;
    for (std::int64_t j = 0; j < rows; ++j)
      if (j != i)
        g[static_cast<std::size_t>(i * rows + j)] =
            (std::exp(row[j] - top) / sum - (j == twin(i) ? 1.0 : 0.0)) / static_cast<double>(rows);
  }
  result.loss /= static_cast<double>(rows);
  result.accuracy /= static_cast<double>(rows);
  if (dprojections == nullptr) return result;
  BT_CHECK(dprojections->device().is_cpu() && dprojections->shape() == projections.shape(),
           "NT-Xent: the gradient must be host {}, got {}", projections.describe(), dprojections->describe());
  float* dh = dprojections->data<float>();
  std::vector<double> dz(static_cast<std::size_t>(dim));
  for (std::int64_t i = 0; i < rows; ++i) {
    std::fill(dz.begin(), dz.end(), 0.0);
    for (std::int64_t j = 0; j < rows; ++j) {
      const double w = (g[static_cast<std::size_t>(i * rows + j)] + g[static_cast<std::size_t>(j * rows + i)]) / temperature;
      if (w == 0.0) continue;
      for (std::int64_t k = 0; k < dim; ++k) dz[static_cast<std::size_t>(k)] += w * z[static_cast<std::size_t>(j * dim + k)];
    }
    // Through z = h / |h|: the component along z does not change the direction.
    double along = 0.0;
    for (std::int64_t k = 0; k < dim; ++k) along += dz[static_cast<std::size_t>(k)] * z[static_cast<std::size_t>(i * dim + k)];
    for (std::int64_t k = 0; k < dim; ++k)
      dh[i * dim + k] = static_cast<float>((dz[static_cast<std::size_t>(k)] - along * z[static_cast<std::size_t>(i * dim + k)]) /
                                           norm[static_cast<std::size_t>(i)]);
  }
  return result;
}

void contrastive_view(const float* tile, std::int64_t channels, std::int64_t size, SplitMix64& rng, float* view) {
  const int t = static_cast<int>(size);
  const double area = rng.uniform(0.35, 1.0);
  const double aspect = std::exp(rng.uniform(std::log(3.0 / 4.0), std::log(4.0 / 3.0)));
  const int width = std::clamp(static_cast<int>(std::lround(t * std::sqrt(area * aspect))), 1, t);
  const int height = std::clamp(static_cast<int>(std::lround(t * std::sqrt(area / aspect))), 1, t);
  const int x = static_cast<int>(rng.below(static_cast<std::uint64_t>(t - width + 1)));
  const int y = static_cast<int>(rng.below(static_cast<std::uint64_t>(t - height + 1)));
  const auto contrast = static_cast<float>(rng.uniform(0.6, 1.4));
  const auto brightness = static_cast<float>(rng.uniform(-0.4, 0.4));
  for (std::int64_t c = 0; c < channels; ++c) {
    // OpenCV reads the planes in place; the const_cast never writes through.
    const cv::Mat source(t, t, CV_32F, const_cast<float*>(tile + c * size * size));
    cv::Mat target(t, t, CV_32F, view + c * size * size);
    cv::resize(source(cv::Rect(x, y, width, height)), target, cv::Size(t, t), 0, 0, cv::INTER_LINEAR);
  }
  for (std::int64_t k = 0; k < channels * size * size; ++k)
    view[k] = view[k] * contrast + brightness + static_cast<float>(0.1 * rng.normal());
}

std::vector<PretextEpoch> pretrain_by_contrast(const Config& config, const std::vector<Sample>& train,
                                               net::Encoder& encoder, Backend backend, std::uint64_t seed,
                                               const std::function<bool()>& stop_requested) {
  const PretrainConfig& p = config.pretrain;
  const PretextPlan plan = plan_pretext(config, train.size());
  const std::int64_t tile_batch = plan.tile_batch;
  BT_CHECK(tile_batch >= 2, "contrastive pretraining: the batch (pretrain.tile_batch, else train.tile_batch) must "
                            "hold at least 2 tiles (a tile and a negative), got {}", tile_batch);

  const Device device = backend_device(backend);
  auto projection = make_projection(encoder.feature_dim(), p.projection_dim, mix_seed(seed, kHead));
  projection->to(device);
  std::vector<net::Parameter*> params = encoder.parameters();
  for (net::Parameter* q : projection->parameters()) params.push_back(q);
  // The schedule counts groups of images (the batch count depends on the tiles each
  // image keeps); every batch of a group steps at its group's rate.
  auto optimizer = make_pretext_optimizer(config, plan, params, backend);

  net::ForwardContext ctx;
  ctx.backend = backend;
  ctx.training = true;
  ctx.keep_activations = true;
  ctx.update_bn_running_stats = true;
  ctx.compute_dtype = config.train.precision;

  const int channels = static_cast<int>(encoder.spec().in_channels);
  std::vector<PretextEpoch> history;
  spdlog::info("pretraining the encoder by contrast (SimCLR): {} epochs over the tiles of {} training images, "
               "batches of {} tiles (2 views each) across {} images, temperature {}, lr {}, {} normalisation",
               p.epochs, plan.images, tile_batch, plan.images_per_step, p.temperature, plan.lr,
               choice_name(p.normalize));
  for (std::int64_t epoch = 1; epoch <= p.epochs; ++epoch) {
    const auto e = static_cast<std::uint64_t>(epoch);
    const auto started = std::chrono::steady_clock::now();
    const std::vector<StreamJob> jobs = pretext_epoch_jobs(train.size(), mix_seed(seed, kOrder, e));
    TileStream stream({tile_batch, config.device.tiles_in_flight, static_cast<int>(config.device.threads)},
                      pretext_preprocessing(config, channels));
    PretextEpoch row;
    row.epoch = epoch;
    double loss_sum = 0.0, correct = 0.0;
    std::int64_t images_in_group = 0, group = 0, views_total = 0;
    Shape tile_shape;
    std::vector<float> pool;  // the group's tiles, host [n, C, T, T]
    auto train_group = [&] {
      optimizer->set_schedule_clock((epoch - 1) * plan.groups_per_epoch + group);
      const auto floats = static_cast<std::size_t>(tile_shape[1] * tile_shape[2] * tile_shape[3]);
      const auto tiles = static_cast<std::int64_t>(pool.size() / floats);
      std::vector<std::int64_t> shuffled(static_cast<std::size_t>(tiles));
      std::iota(shuffled.begin(), shuffled.end(), std::int64_t{0});
      SplitMix64 shuffle_rng(mix_seed(seed, kShuffle, e, static_cast<std::uint64_t>(group)));
      seeded_shuffle(shuffled, shuffle_rng);
      for (std::int64_t first = 0; first + 1 < tiles; first += tile_batch) {
        const std::int64_t n = std::min(tile_batch, tiles - first);
        Tensor views = Tensor::empty({2 * n, tile_shape[1], tile_shape[2], tile_shape[3]});
        SplitMix64 view_rng(mix_seed(seed, kViews, e, static_cast<std::uint64_t>(group) * 1'000'003ull +
                                                          static_cast<std::uint64_t>(first)));
        for (std::int64_t r = 0; r < n; ++r) {
          const float* tile = pool.data() + static_cast<std::size_t>(shuffled[static_cast<std::size_t>(first + r)]) * floats;
          contrastive_view(tile, tile_shape[1], tile_shape[2], view_rng, views.data<float>() + r * static_cast<std::int64_t>(floats));
          contrastive_view(tile, tile_shape[1], tile_shape[2], view_rng,
                           views.data<float>() + (r + n) * static_cast<std::int64_t>(floats));
        }
        const Tensor projected = projection->forward(encoder.forward(views.to(device), ctx), ctx);
        Tensor dprojected = Tensor::empty(projected.shape());
        const NtXentResult batch = nt_xent(projected.to(Device::cpu()), p.temperature, &dprojected);
        if (!std::isfinite(batch.loss))
          throw Error(fmt::format("the contrastive pretext loss is {} at pretraining epoch {} (images {}..{} of the "
                                  "epoch's order); lower pretrain.lr",
                                  batch.loss, epoch, group * plan.images_per_step, (group + 1) * plan.images_per_step - 1));
        encoder.backward(projection->backward(dprojected.to(device)));
        optimizer->step();
        optimizer->zero_grad();
        loss_sum += batch.loss * static_cast<double>(2 * n);
        correct += batch.accuracy * static_cast<double>(2 * n);
        views_total += 2 * n;
      }
      pool.clear();
      images_in_group = 0;
      ++group;
      if (stop_requested()) throw_pretext_interrupted(epoch, p.epochs);
    };
    optimizer->zero_grad();
    stream.run(
        jobs,
        [&](std::size_t image) {
          return image_tiling(train[image].path, config.tiler, true, mix_seed(seed, kSubsample, e, image),
                              mix_seed(seed, kAugment, e, image), config.data.max_value);
        },
        [&](const TileBatch& batch) {
          const Tensor& pixels = batch.pixels;
          if (tile_shape.empty()) tile_shape = pixels.shape();
          BT_CHECK(pixels.dim(1) == tile_shape[1] && pixels.dim(2) == tile_shape[2] && pixels.dim(3) == tile_shape[3],
                   "{}: contrastive pretraining needs tiles of one shape, got {} after tiles of {}x{}x{}",
                   train[batch.image].path, pixels.describe(), tile_shape[1], tile_shape[2], tile_shape[3]);
          BT_CHECK(pixels.dim(2) == pixels.dim(3), "{}: contrastive pretraining needs square tiles, got {}x{}",
                   train[batch.image].path, pixels.dim(2), pixels.dim(3));
          pool.insert(pool.end(), pixels.data<float>(), pixels.data<float>() + pixels.numel());
          row.tiles += pixels.dim(0);
          if (!batch.last_of_job) return;
          if (++images_in_group == plan.images_per_step) train_group();
        });
    if (images_in_group > 0) train_group();
    row.loss = loss_sum / static_cast<double>(std::max<std::int64_t>(views_total, 1));
    row.tile_accuracy = correct / static_cast<double>(std::max<std::int64_t>(views_total, 1));
    row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    history.push_back(row);
    spdlog::info("pretraining epoch {}/{}: contrastive loss {:.4f} (chance ln(2N - 1) = {:.3f}), twin found {:.3f}, "
                 "{} tiles, {:.1f} s, {:.1f} tiles/s",
                 epoch, p.epochs, row.loss, std::log(2.0 * static_cast<double>(tile_batch) - 1.0), row.tile_accuracy,
                 row.tiles, row.seconds, static_cast<double>(row.tiles) / std::max(row.seconds, 1e-9));
  }
  return history;
}

}  // namespace bigtrain
