#pragma once
// An image's tiling: which tiles of one image a pass reads. The image opened (header
// only), the grid laid out at the configured level or downsample, background tiles
// dropped, and in training a seeded random subset of at most max_tiles_per_image
// tiles. Pass 1 and pass 2 of an image share one tiling, so they read the same tiles
// in the same order. (Not to be confused with `bigtrain plan`, pipeline/plan/, or
// net's memory plan.)
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <opencv2/core/types.hpp>

#include "pipeline/config/config.hpp"
#include "tiler/background.hpp"
#include "tiler/image_source.hpp"
#include "tiler/tile_reader.hpp"

namespace bigtrain {

struct ImageTiling {
  std::string path;
  std::shared_ptr<const tiler::ImageSource> source;
  tiler::Sampling sampling;
  std::vector<cv::Rect> tiles;  // grid pixels of `sampling`
  int tile_size = 0;
  std::int64_t grid_tiles = 0;          // before background filtering and subsampling
  std::int64_t background_dropped = 0;
  std::uint64_t augment_seed = 0;       // tile k uses mix_seed(augment_seed, k)
  int full_scale = 255;                 // the pixel value that is 1.0, for the thumbnail and the network
};

// `subsample_seed` picks the subset when config.max_tiles_per_image applies and
// `training` is true. `max_value` > 0 (data.max_value) replaces the image's own full
// scale. Throws Error naming the image when it cannot be opened or keeps no tile.
ImageTiling image_tiling(const std::string& path, const TilerConfig& config, bool training, std::uint64_t subsample_seed,
                     std::uint64_t augment_seed, std::int64_t max_value = 0);

// The background options a tiler config asks for.
tiler::ForegroundOptions foreground_options(const TilerConfig& config);

}  // namespace bigtrain
