#include "pipeline/train/pretext.hpp"

#include <chrono>
#include <cmath>
#include <numeric>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "net/aggregator.hpp"
#include "net/linear.hpp"
#include "pipeline/common/random.hpp"
#include "pipeline/data/image_tiling.hpp"
#include "pipeline/data/preprocess.hpp"
#include "pipeline/data/tile_stream.hpp"
#include "pipeline/engine/mixed_instances.hpp"
#include "pipeline/train/pretext_common.hpp"

namespace bigtrain {
namespace {

constexpr int kTurns = 4;
enum PretextStream : std::uint64_t { kOrder = 1, kSubsample = 2, kAugment = 3, kTurn = 4, kShuffle = 5, kHead = 6 };

}  // namespace

void rotate_tile_quarter_turns(float* tile, std::int64_t channels, std::int64_t size, int turns) {
  turns = ((turns % kTurns) + kTurns) % kTurns;
  if (turns == 0) return;
  std::vector<float> source(static_cast<std::size_t>(size * size));
  for (std::int64_t c = 0; c < channels; ++c) {
    float* plane = tile + c * size * size;
    std::copy(plane, plane + size * size, source.begin());
    for (std::int64_t y = 0; y < size; ++y)
      for (std::int64_t x = 0; x < size; ++x) {
        // Output (y, x) reads the input point that `turns` counter-clockwise quarter
        // turns carry onto it.
        std::int64_t sy = y, sx = x;
        for (int t = 0; t < turns; ++t) {
          const std::int64_t ny = sx, nx = size - 1 - sy;
          sy = ny;
          sx = nx;
        }
        plane[y * size + x] = source[static_cast<std::size_t>(sy * size + sx)];
      }
  }
}

std::string pretext_csv(const std::vector<PretextEpoch>& epochs) {
  std::string csv = "epoch,loss,tile_accuracy,tiles,seconds\n";
  for (const PretextEpoch& e : epochs)
    csv += fmt::format("{},{:.6f},{:.6f},{},{:.3f}\n", e.epoch, e.loss, e.tile_accuracy, e.tiles, e.seconds);
  return csv;
}

std::vector<PretextEpoch> pretrain_by_rotation(const Config& config, const std::vector<Sample>& train,
                                               net::Encoder& encoder, Backend backend, std::uint64_t seed,
                                               const std::function<bool()>& stop_requested) {
  const PretrainConfig& p = config.pretrain;
  const PretextPlan plan = plan_pretext(config, train.size());

  const Device device = backend_device(backend);
  net::Linear head("pretext_head", encoder.feature_dim(), kTurns, mix_seed(seed, kHead));
  head.to(device);
  auto vote_only = net::make_aggregator(net::AggregatorSpec{net::AggregatorKind::instance}, encoder.feature_dim(),
                                        mix_seed(seed, kHead, 1));
  const ImageModel model{&encoder, vote_only.get(), &head};
  MixedInstanceStep step(model, MixedInstanceOptions{.backend = backend,
                                                     .freeze_bn = false,
                                                     .encoder_compute_dtype = config.train.precision,
                                                     .tile_batch = plan.tile_batch,
                                                     .distinct_images = false});
  auto optimizer = make_pretext_optimizer(config, plan, model.parameters(), backend);

  const int channels = static_cast<int>(encoder.spec().in_channels);
  std::vector<PretextEpoch> history;
  spdlog::info("pretraining the encoder by rotation prediction: {} epochs over the tiles of {} training images, "
               "{} images a step, lr {}, {} normalisation",
               p.epochs, plan.images, plan.images_per_step, plan.lr, choice_name(p.normalize));
  for (std::int64_t epoch = 1; epoch <= p.epochs; ++epoch) {
    const auto e = static_cast<std::uint64_t>(epoch);
    const auto started = std::chrono::steady_clock::now();
    const std::vector<StreamJob> schedule_jobs = pretext_epoch_jobs(train.size(), mix_seed(seed, kOrder, e));
    TileStream stream({plan.tile_batch, config.device.tiles_in_flight, static_cast<int>(config.device.threads)},
                      pretext_preprocessing(config, channels));
    PretextEpoch row;
    row.epoch = epoch;
    double loss_sum = 0.0;
    std::int64_t correct = 0, images_in_step = 0, step_index = 0;
    auto take_step = [&] {
      // train.step_every_batch: an update after every tile batch, at the rate of the
      // schedule's position in groups of images, as in training.
      if (config.train.step_every_batch) optimizer->set_schedule_clock((epoch - 1) * plan.groups_per_epoch + step_index);
      const std::vector<MixedImageResult> results =
          config.train.step_every_batch
              ? step.train(1.0f, mix_seed(seed, kShuffle, e, step_index),
                           [&] {
                             optimizer->step();
                             optimizer->zero_grad();
                           })
              : step.train(1.0f / static_cast<float>(images_in_step), mix_seed(seed, kShuffle, e, step_index));
      for (const MixedImageResult& r : results) {
        if (!std::isfinite(r.tile_loss))
          throw Error(fmt::format("{}: the rotation pretext loss is {} at pretraining epoch {}; lower pretrain.lr",
                                  train[r.image].path, r.tile_loss, epoch));
        loss_sum += r.tile_loss * static_cast<double>(r.vote.outcome.tiles);
        correct += r.tiles_correct;
      }
      optimizer->step();
      optimizer->zero_grad();
      images_in_step = 0;
      ++step_index;
      if (stop_requested()) throw_pretext_interrupted(epoch, p.epochs);
    };
    optimizer->zero_grad();
    stream.run(
        schedule_jobs,
        [&](std::size_t image) {
          return image_tiling(train[image].path, config.tiler, true, mix_seed(seed, kSubsample, e, image),
                              mix_seed(seed, kAugment, e, image), config.data.max_value);
        },
        [&](const TileBatch& batch) {
          const Tensor& pixels = batch.pixels;
          BT_CHECK(pixels.dim(2) == pixels.dim(3), "{}: rotation pretraining needs square tiles, got {}x{}",
                   train[batch.image].path, pixels.dim(2), pixels.dim(3));
          Tensor turned = pixels.clone();
          const std::int64_t rows = turned.dim(0), plane = turned.dim(1) * turned.dim(2) * turned.dim(3);
          std::vector<int> turns(static_cast<std::size_t>(rows));
          SplitMix64 turn_rng(mix_seed(seed, kTurn, e, batch.image * 1'000'003ull + static_cast<std::uint64_t>(batch.first_tile)));
          for (std::int64_t r = 0; r < rows; ++r) {
            turns[static_cast<std::size_t>(r)] = static_cast<int>(turn_rng.below(kTurns));
            rotate_tile_quarter_turns(turned.data<float>() + r * plane, turned.dim(1), turned.dim(2),
                                      turns[static_cast<std::size_t>(r)]);
          }
          step.add_labelled(batch.image, 0, static_cast<std::int64_t>(batch.plan->tiles.size()), batch.plan, turned,
                            batch.first_tile, turns);
          row.tiles += rows;
          if (!batch.last_of_job) return;
          ++images_in_step;
          if (images_in_step == plan.images_per_step) take_step();
        });
    if (images_in_step > 0) take_step();
    row.loss = loss_sum / static_cast<double>(std::max<std::int64_t>(row.tiles, 1));
    row.tile_accuracy = static_cast<double>(correct) / static_cast<double>(std::max<std::int64_t>(row.tiles, 1));
    row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    history.push_back(row);
    spdlog::info("pretraining epoch {}/{}: rotation loss {:.4f} (chance ln 4 = 1.386), tile accuracy {:.3f} (chance "
                 "0.25), {} tiles, {:.1f} s, {:.1f} tiles/s",
                 epoch, p.epochs, row.loss, row.tile_accuracy, row.tiles, row.seconds,
                 static_cast<double>(row.tiles) / std::max(row.seconds, 1e-9));
  }
  return history;
}

}  // namespace bigtrain
