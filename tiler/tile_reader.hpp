#pragma once
// Reading a grid's tiles from an ImageSource, at a pyramid level or at a downsample
// factor. A grid lives in "grid pixels"; Sampling says how they map to a level.
#include <cstdint>

#include <opencv2/core.hpp>

#include "tiler/image_source.hpp"

namespace bigtrain::tiler {

struct Sampling {
  int level = 0;        // pyramid level the pixels are read from
  int64_t width = 0;    // size of the image in grid pixels
  int64_t height = 0;
  double scale_x = 1.0; // level pixels per grid pixel (1 = read the level as stored)
  double scale_y = 1.0;
  double downsample = 1.0;  // level-0 pixels per grid pixel

  bool resampled() const { return scale_x != 1.0 || scale_y != 1.0; }
};

// The level as stored. Throws bigtrain::Error if the level does not exist.
Sampling sampling_at_level(const ImageInfo& info, int level);
// Level 0 reduced by `factor` (>= 1): read from the nearest level at least as fine
// and resampled with area interpolation. Throws bigtrain::Error for factor < 1.
Sampling sampling_at_downsample(const ImageInfo& info, double factor);

// The pixels of `rect` (grid pixels) as a rect.height x rect.width Mat of the
// source's type. Parts outside the image are filled with `pad_value`.
cv::Mat read_tile(const ImageSource& source, const Sampling& sampling, const cv::Rect& rect, double pad_value = 0);

}  // namespace bigtrain::tiler
