#pragma once
// A deterministic, procedurally textured test image: tissue-like blobs with
// nucleus-like dots on a bright slide background, any size, rendered rect by rect
// (so `make-image` can stream a 20000x20000 TIFF). Used by the demo, benchmarks,
// memory checks and tests; the same seed always gives the same pixels.
#include <cstdint>

#include <opencv2/core.hpp>

namespace bigtrain::tiler {

struct SyntheticImage {
  int64_t width = 0;   // level-0 size
  int64_t height = 0;
  int channels = 3;    // 1 or 3
  int bits = 8;        // 8 or 16
  uint64_t seed = 0;
  // Where tissue starts on the smooth blob field (uniform-ish in [0, 1]): 0.5 covers
  // about half the slide, higher values leave smaller, sparser blobs (0.62: ~10%).
  double tissue_cutoff = 0.5;
  // Amplitude of the per-pixel noise of the background (8-bit levels, peak to peak).
  // 0 gives the flat field of a blank scanner area: background tiles are then all
  // one value, which the TIFF writer encodes once (fast 50000^2 test images).
  double background_grain = 6.0;
};

// Fills `pixels` (rect.height x rect.width, type CV_{8,16}UC{channels}, RGB) with
// `rect` of pyramid `level`, whose pixel (x, y) shows level-0 point (x, y) * 2^level.
void render_synthetic(const SyntheticImage& image, int level, const cv::Rect& rect, cv::Mat& pixels);

}  // namespace bigtrain::tiler
