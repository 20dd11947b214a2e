#include "pipeline/engine/bn_calibration.hpp"

#include <algorithm>
#include <numeric>

#include "kernels/core/out_of_memory.hpp"
#include "kernels/upload.hpp"
#include "pipeline/common/random.hpp"
#include "pipeline/data/image_tiling.hpp"
#include "pipeline/data/tile_stream.hpp"

namespace bigtrain {

BnCalibration calibrate_batch_norm(net::Encoder& encoder, Backend backend, const Config& config,
                                   const std::vector<Sample>& train, std::int64_t images, std::uint64_t seed) {
  BnCalibration result;
  std::vector<std::size_t> order(train.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  SplitMix64 rng(seed);
  seeded_shuffle(order, rng);
  order.resize(std::min(order.size(), static_cast<std::size_t>(std::max<std::int64_t>(images, 0))));
  if (order.empty()) return result;

  std::vector<StreamJob> schedule;
  for (std::size_t image : order) schedule.push_back({image, 0});
  const int channels = static_cast<int>(encoder.spec().in_channels);
  TileStream stream({config.train.tile_batch, config.device.tiles_in_flight, static_cast<int>(config.device.threads)},
                    Preprocessing::from_config(config, channels, true));
  net::ForwardContext ctx;
  ctx.backend = backend;
  ctx.training = true;
  ctx.freeze_bn = false;
  ctx.keep_activations = false;
  ctx.update_bn_running_stats = true;
  MemoryPhase phase("bn calibration");
  const StreamStats stats = stream.run(
      schedule,
      [&](std::size_t image) {
        return image_tiling(train[image].path, config.tiler, true, mix_seed(seed, image), mix_seed(~seed, image),
                          config.data.max_value);
      },
      [&](const TileBatch& batch) {
        // An image's single leftover tile would weigh as much as a full batch (and a
        // 1x1 feature map of one tile has no variance); whole-image inputs (resize
        // mode, tile_batch 1) are batches of one by design and count.
        if (batch.pixels.dim(0) < std::min<std::int64_t>(config.train.tile_batch, 2)) return;
        ctx.bn_momentum = 1.0f / static_cast<float>(result.batches + 1);
        encoder.forward(kernels::upload_async(backend, batch.pixels).get(), ctx);
        ++result.batches;
        result.tiles += batch.pixels.dim(0);
      });
  result.images = static_cast<std::int64_t>(order.size());
  result.seconds = stats.seconds;
  return result;
}

}  // namespace bigtrain
