#pragma once
// Background filtering on a low-resolution thumbnail: tiles whose foreground
// fraction is below a minimum are skipped. The thumbnail comes from the coarsest
// pyramid level, reduced further by streaming it in chunks, so the full-resolution
// image is never held in memory.
#include <optional>

#include <opencv2/core.hpp>

#include "tiler/image_source.hpp"
#include "tiler/tile_reader.hpp"

namespace bigtrain::tiler {

struct Thumbnail {
  cv::Mat pixels;         // 8-bit (16-bit sources scaled by 1/257), source channels, RGB order
  double scale_x = 1.0;   // thumbnail pixels per level-0 pixel
  double scale_y = 1.0;
};

// A thumbnail whose longer side is at most `max_side` (smaller if the coarsest level is).
Thumbnail make_thumbnail(const ImageSource& source, int max_side = 1024);

struct ForegroundOptions {
  std::optional<int> threshold;  // grey level 0..255 on the thumbnail; Otsu's (of the blurred thumbnail) when unset
  bool dark_foreground = true;   // tissue on a bright slide; false for bright objects on dark
};

struct ForegroundMask {
  cv::Mat mask;         // CV_8U, 1 = foreground
  int threshold = 0;    // the grey level used (Otsu's or the fixed one)
  bool uniform = false; // no contrast at all: every pixel counted as foreground
};

ForegroundMask foreground_mask(const Thumbnail& thumbnail, const ForegroundOptions& options = {});

// Fraction of `rect` (grid pixels of `sampling`) that is foreground. Parts of the
// rect outside the image count as background.
double foreground_fraction(const ForegroundMask& mask, const Sampling& sampling, const cv::Rect& rect);

}  // namespace bigtrain::tiler
