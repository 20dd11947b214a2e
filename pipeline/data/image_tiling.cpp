#include "pipeline/data/image_tiling.hpp"

#include <algorithm>
#include <numeric>

#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "pipeline/common/random.hpp"
#include "pipeline/data/foreground_cache.hpp"
#include "pipeline/data/resize_cache.hpp"
#include "tiler/background.hpp"
#include "tiler/tile_grid.hpp"

namespace bigtrain {

tiler::ForegroundOptions foreground_options(const TilerConfig& config) {
  tiler::ForegroundOptions options;
  options.mode = config.background;
  if (config.threshold >= 0 && config.background != tiler::BackgroundMode::otsu)
    options.threshold = static_cast<int>(config.threshold);
  options.dark_foreground = config.foreground == Foreground::dark;
  return options;
}

ImageTiling image_tiling(const std::string& path, const TilerConfig& config, bool training, std::uint64_t subsample_seed,
                     std::uint64_t augment_seed, std::int64_t max_value) {
  ImageTiling plan;
  plan.path = path;
  plan.source = tiler::open_image(path);
  plan.augment_seed = augment_seed;
  const tiler::ImageInfo& info = plan.source->info();
  plan.full_scale = max_value > 0 ? static_cast<int>(max_value) : info.full_scale();
  if (config.mode == TilerMode::resize) {
    // The baseline: the whole image at resize_size x resize_size as one "tile".
    const double factor = std::max(static_cast<double>(info.width()), static_cast<double>(info.height())) /
                          static_cast<double>(config.resize_size);
    const tiler::Sampling sampling = tiler::sampling_at_downsample(info, std::max(1.0, factor));
    plan.tile_size = static_cast<int>(config.resize_size);
    const cv::Rect whole(0, 0, plan.tile_size, plan.tile_size);
    plan.tiles = {whole};
    plan.grid_tiles = 1;
    if (config.resize_cache_mb == 0) {
      plan.sampling = sampling;
      return plan;
    }
    // The resized pixels, read once per process (resize_cache.hpp): the reader
    // then copies them from memory at level 0 instead of re-reading the image.
    const std::shared_ptr<const tiler::ImageSource> original = plan.source;
    plan.source = cached_resized_image(
        path, config.resize_size, config.resize_cache_mb << 20,
        [&] { return tiler::read_tile(*original, sampling, whole); }, info);
    plan.sampling = tiler::sampling_at_level(plan.source->info(), 0);
    return plan;
  }
  plan.sampling = config.downsample > 1.0 ? tiler::sampling_at_downsample(info, config.downsample)
                                          : tiler::sampling_at_level(info, static_cast<int>(config.level));
  if (config.level > 0 && config.downsample > 1.0)
    throw Error(fmt::format("{}: set tiler.level or tiler.downsample, not both", path));
  tiler::TileGrid grid(plan.sampling.width, plan.sampling.height, static_cast<int>(config.tile),
                       static_cast<int>(config.overlap), config.border);
  plan.tile_size = static_cast<int>(config.tile);
  plan.grid_tiles = static_cast<std::int64_t>(grid.tiles().size());
  if (config.min_foreground > 0 && config.background != tiler::BackgroundMode::none) {
    const tiler::ForegroundOptions foreground = foreground_options(config);
    const std::string key =
        fmt::format("{}|{}x{}@{},{}|tile {} overlap {} border {}|mode {} threshold {} dark {} min {} scale {}", path,
                    plan.sampling.width, plan.sampling.height, plan.sampling.level, plan.sampling.downsample,
                    config.tile, config.overlap, static_cast<int>(config.border), static_cast<int>(foreground.mode),
                    foreground.threshold.value_or(-1), foreground.dark_foreground, config.min_foreground,
                    plan.full_scale);
    plan.tiles = cached_foreground_tiles(key, [&] {
      const tiler::Thumbnail thumbnail = tiler::make_thumbnail(*plan.source, 1024, plan.full_scale);
      const tiler::ForegroundMask mask = tiler::foreground_mask(thumbnail, foreground);
      std::vector<cv::Rect> kept;
      std::vector<double> fractions;
      for (const auto& tile : grid.tiles()) {
        fractions.push_back(tiler::foreground_fraction(mask, plan.sampling, tile.rect));
        if (fractions.back() >= config.min_foreground) kept.push_back(tile.rect);
      }
      if (!kept.empty() || fractions.empty()) return kept;
      // One image of hundreds whose objects are fainter than the threshold should
      // neither stop the run nor vanish from it: it keeps its most foreground tiles.
      const double most = *std::max_element(fractions.begin(), fractions.end());
      for (std::size_t i = 0; i < fractions.size(); ++i)
        if (fractions[i] == most) kept.push_back(grid.tiles()[i].rect);
      spdlog::warn("{}: no tile reaches tiler.min_foreground = {} ({}); keeping the {} with the most foreground ({:.4f})",
                   path, config.min_foreground, choice_name(config.background), kept.size(), most);
      return kept;
    });
  } else {
    for (const auto& tile : grid.tiles()) plan.tiles.push_back(tile.rect);
  }
  plan.background_dropped = plan.grid_tiles - static_cast<std::int64_t>(plan.tiles.size());
  if (plan.tiles.empty())
    throw Error(fmt::format("{}: no tile left of {} after background filtering (tiler.background = {}, "
                            "tiler.min_foreground = {})",
                            path, plan.grid_tiles, choice_name(config.background), config.min_foreground));
  const auto limit = static_cast<std::size_t>(config.max_tiles_per_image);
  if (training && limit > 0 && plan.tiles.size() > limit) {
    std::vector<std::size_t> order(plan.tiles.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    SplitMix64 rng(subsample_seed);
    seeded_shuffle(order, rng);
    order.resize(limit);
    std::sort(order.begin(), order.end());  // grid order: neighbouring tiles share file blocks
    std::vector<cv::Rect> kept;
    for (std::size_t i : order) kept.push_back(plan.tiles[i]);
    plan.tiles = std::move(kept);
  }
  return plan;
}

}  // namespace bigtrain
