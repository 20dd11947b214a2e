#include "tiler/synthetic_image.hpp"

#include <algorithm>
#include <cmath>

#include <tbb/parallel_for.h>

#include "kernels/core/error.hpp"

namespace bigtrain::tiler {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64 finaliser: a cheap, well-spread hash
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t hash3(uint64_t seed, int64_t a, int64_t b) {
  return mix(seed ^ mix(static_cast<uint64_t>(a) * 0x100000001B3ull ^ mix(static_cast<uint64_t>(b))));
}

double unit(uint64_t h) { return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0); }

// Smooth value noise on a lattice of `cell` pixels: blob shapes. The lattice values
// of the last cell are kept: neighbouring pixels share a cell thousands of pixels
// wide, and hashing its corners again for every pixel was most of the rendering.
class ValueNoise {
 public:
  ValueNoise(uint64_t seed, double cell) : seed_(seed), cell_(cell) {}

  double operator()(double x, double y) {
    const double fx = x / cell_, fy = y / cell_;
    const int64_t ix = static_cast<int64_t>(std::floor(fx)), iy = static_cast<int64_t>(std::floor(fy));
    if (ix != ix_ || iy != iy_ || !cached_) {
      a_ = unit(hash3(seed_, ix, iy));
      b_ = unit(hash3(seed_, ix + 1, iy));
      c_ = unit(hash3(seed_, ix, iy + 1));
      d_ = unit(hash3(seed_, ix + 1, iy + 1));
      ix_ = ix;
      iy_ = iy;
      cached_ = true;
    }
    double tx = fx - ix, ty = fy - iy;
    tx = tx * tx * (3 - 2 * tx);
    ty = ty * ty * (3 - 2 * ty);
    return (a_ + (b_ - a_) * tx) * (1 - ty) + (c_ + (d_ - c_) * tx) * ty;
  }

 private:
  uint64_t seed_;
  double cell_;
  int64_t ix_ = 0, iy_ = 0;
  bool cached_ = false;
  double a_ = 0, b_ = 0, c_ = 0, d_ = 0;
};

// An upper bound of value_noise over the level-0 box [x0, x1] x [y0, y1]: the noise
// is a convex combination of the lattice values at the corners of the cell holding
// the point, so it never exceeds the largest lattice value of the cells the box touches.
double value_noise_upper_bound(uint64_t seed, double x0, double x1, double y0, double y1, double cell) {
  const int64_t ix0 = static_cast<int64_t>(std::floor(x0 / cell)), ix1 = static_cast<int64_t>(std::floor(x1 / cell)) + 1;
  const int64_t iy0 = static_cast<int64_t>(std::floor(y0 / cell)), iy1 = static_cast<int64_t>(std::floor(y1 / cell)) + 1;
  double bound = 0.0;
  for (int64_t iy = iy0; iy <= iy1; ++iy)
    for (int64_t ix = ix0; ix <= ix1; ++ix) bound = std::max(bound, unit(hash3(seed, ix, iy)));
  return bound;
}

struct Rgb {
  double r, g, b;
};

Rgb background_at(const SyntheticImage& image, int64_t X, int64_t Y) {
  const double grain = image.background_grain == 0.0 ? 0.0 : unit(hash3(image.seed + 2, X, Y)) - 0.5;
  const double g = image.background_grain * grain;
  return {236 + g, 234 + g, 240 + g};
}

// The blob field of one image; one per thread (it caches).
struct TissueField {
  TissueField(const SyntheticImage& image, double cell) : coarse(image.seed, cell), fine(image.seed + 1, cell / 4) {}
  double operator()(double x, double y) { return 0.7 * coarse(x, y) + 0.3 * fine(x, y); }
  ValueNoise coarse, fine;
};

Rgb shade(const SyntheticImage& image, TissueField& tissue_field, int64_t X, int64_t Y) {
  const double x = static_cast<double>(X), y = static_cast<double>(Y);
  const double field = tissue_field(x, y);
  const double t = std::clamp((field - image.tissue_cutoff) / 0.08, 0.0, 1.0);
  const double tissue = t * t * (3 - 2 * t);
  const double grain = unit(hash3(image.seed + 2, X, Y)) - 0.5;
  const Rgb background = background_at(image, X, Y);
  Rgb stroma{214 + 20 * grain, 128 + 24 * grain, 178 + 16 * grain};
  if (tissue > 0.5) {
    // One nucleus per 14-pixel cell, at a hashed position and radius.
    const int64_t cx = X / 14 - (X < 0), cy = Y / 14 - (Y < 0);
    const uint64_t h = hash3(image.seed + 3, cx, cy);
    const double nx = cx * 14 + 3 + (h & 7), ny = cy * 14 + 3 + ((h >> 3) & 7), radius = 2.5 + ((h >> 6) & 3);
    if ((h >> 8) % 3 != 0 && (x - nx) * (x - nx) + (y - ny) * (y - ny) <= radius * radius)
      stroma = {88 + 20 * grain, 58 + 16 * grain, 140 + 20 * grain};
  }
  return {background.r + (stroma.r - background.r) * tissue, background.g + (stroma.g - background.g) * tissue,
          background.b + (stroma.b - background.b) * tissue};
}

}  // namespace

void render_synthetic(const SyntheticImage& image, int level, const cv::Rect& rect, cv::Mat& pixels) {
  BT_CHECK(image.width > 0 && image.height > 0, "synthetic image size must be positive");
  BT_CHECK((image.channels == 1 || image.channels == 3) && (image.bits == 8 || image.bits == 16),
           "synthetic image must be 1 or 3 channels of 8 or 16 bits");
  pixels.create(rect.height, rect.width, CV_MAKETYPE(image.bits == 16 ? CV_16U : CV_8U, image.channels));
  const double cell = std::max<double>(64, static_cast<double>(std::max(image.width, image.height)) / 6);
  const int64_t step = int64_t{1} << level;
  // Most of a slide is background: when the tissue field cannot reach the threshold
  // anywhere in the rect, every pixel is plain background (the same value shade()
  // gives there, since its tissue weight is exactly 0), without evaluating the field.
  // The margin absorbs the rounding of the interpolation.
  const double x0 = static_cast<double>(rect.x) * step, x1 = static_cast<double>(rect.x + rect.width - 1) * step;
  const double y0 = static_cast<double>(rect.y) * step, y1 = static_cast<double>(rect.y + rect.height - 1) * step;
  const bool all_background = 0.7 * value_noise_upper_bound(image.seed, x0, x1, y0, y1, cell) +
                                  0.3 * value_noise_upper_bound(image.seed + 1, x0, x1, y0, y1, cell / 4) <
                              image.tissue_cutoff - 1e-9;
  if (all_background && image.background_grain == 0.0 && image.bits == 8) {
    // One value everywhere: what the loop below would write into every pixel.
    const Rgb c = background_at(image, 0, 0);
    if (image.channels == 1) pixels.setTo(cv::Scalar(std::clamp(static_cast<int>(0.299 * c.r + 0.587 * c.g + 0.114 * c.b), 0, 255)));
    else pixels.setTo(cv::Scalar(static_cast<int>(c.r), static_cast<int>(c.g), static_cast<int>(c.b)));
    return;
  }
  tbb::parallel_for(0, rect.height, [&](int row) {
    TissueField field(image, cell);
    const int64_t Y = (rect.y + int64_t{row}) * step;
    for (int col = 0; col < rect.width; ++col) {
      const int64_t X = (rect.x + int64_t{col}) * step;
      const Rgb c = all_background ? background_at(image, X, Y) : shade(image, field, X, Y);
      double values[3] = {c.r, c.g, c.b};
      if (image.channels == 1) values[0] = 0.299 * c.r + 0.587 * c.g + 0.114 * c.b;
      for (int ch = 0; ch < image.channels; ++ch) {
        const int v8 = std::clamp(static_cast<int>(values[ch]), 0, 255);
        if (image.bits == 8) {
          pixels.ptr<uint8_t>(row)[col * image.channels + ch] = static_cast<uint8_t>(v8);
        } else {
          // Fill the low byte too, so 16-bit paths are checked on all 16 bits.
          const int low = static_cast<int>(hash3(image.seed + 4 + ch, X, Y) & 0xFF);
          pixels.ptr<uint16_t>(row)[col * image.channels + ch] = static_cast<uint16_t>(v8 * 256 + low);
        }
      }
    }
  });
}

}  // namespace bigtrain::tiler
