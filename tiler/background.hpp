#pragma once
// Background filtering on a low-resolution thumbnail: tiles whose foreground
// fraction is below a minimum are skipped. The thumbnail comes from the coarsest
// pyramid level, reduced further by streaming it in chunks, so the full-resolution
// image is never held in memory.
#include <optional>

#include <opencv2/core.hpp>

#include "tiler/background_mode.hpp"
#include "tiler/image_source.hpp"
#include "tiler/tile_reader.hpp"

namespace bigtrain::tiler {

struct Thumbnail {
  // 8-bit, source channels, RGB order: pixel * 255 / full scale, the scale the
  // network divides by (ImageInfo::full_scale, or the caller's override), so the
  // background filter and the network see the same brightness.
  cv::Mat pixels;
  double scale_x = 1.0;   // thumbnail pixels per level-0 pixel
  double scale_y = 1.0;
};

// A thumbnail whose longer side is at most `max_side` (smaller if the coarsest level is).
// `full_scale` > 0 overrides the image's own (ImageInfo::full_scale).
Thumbnail make_thumbnail(const ImageSource& source, int max_side = 1024, int full_scale = 0);

// `mode`: see tiler/background_mode.hpp.
struct ForegroundOptions {
  BackgroundMode mode = BackgroundMode::otsu;
  // fixed: the grey level 0..255 (required). otsu: when set, used instead of Otsu's
  // (the mode is then fixed). local_contrast: the least departure, in grey levels,
  // counted as foreground (unset: chosen from the noise).
  std::optional<int> threshold;
  bool dark_foreground = true;   // tissue on a bright slide; false for bright objects on dark
};

struct ForegroundMask {
  cv::Mat mask;         // CV_8U, 1 = foreground
  BackgroundMode mode = BackgroundMode::otsu;  // the mode used
  int threshold = 0;    // the grey level (otsu, fixed) or least departure (local_contrast) used
  bool uniform = false; // no contrast at all: every pixel counted as foreground
};

ForegroundMask foreground_mask(const Thumbnail& thumbnail, const ForegroundOptions& options = {});

// Fraction of `rect` (grid pixels of `sampling`) that is foreground. Parts of the
// rect outside the image count as background.
double foreground_fraction(const ForegroundMask& mask, const Sampling& sampling, const cv::Rect& rect);

}  // namespace bigtrain::tiler
