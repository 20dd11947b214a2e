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

// Smooth value noise on a lattice of `cell` pixels: blob shapes.
double value_noise(uint64_t seed, double x, double y, double cell) {
  const double fx = x / cell, fy = y / cell;
  const int64_t ix = static_cast<int64_t>(std::floor(fx)), iy = static_cast<int64_t>(std::floor(fy));
  double tx = fx - ix, ty = fy - iy;
  tx = tx * tx * (3 - 2 * tx);
  ty = ty * ty * (3 - 2 * ty);
  const double a = unit(hash3(seed, ix, iy)), b = unit(hash3(seed, ix + 1, iy));
  const double c = unit(hash3(seed, ix, iy + 1)), d = unit(hash3(seed, ix + 1, iy + 1));
  return (a + (b - a) * tx) * (1 - ty) + (c + (d - c) * tx) * ty;
}

struct Rgb {
  double r, g, b;
};

Rgb shade(const SyntheticImage& image, double cell, int64_t X, int64_t Y) {
  const double x = static_cast<double>(X), y = static_cast<double>(Y);
  const double field = 0.7 * value_noise(image.seed, x, y, cell) + 0.3 * value_noise(image.seed + 1, x, y, cell / 4);
  const double t = std::clamp((field - 0.5) / 0.08, 0.0, 1.0);
  const double tissue = t * t * (3 - 2 * t);
  const double grain = unit(hash3(image.seed + 2, X, Y)) - 0.5;
  Rgb background{236 + 6 * grain, 234 + 6 * grain, 240 + 6 * grain};
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
  tbb::parallel_for(0, rect.height, [&](int row) {
    const int64_t Y = (rect.y + int64_t{row}) * step;
    for (int col = 0; col < rect.width; ++col) {
      const int64_t X = (rect.x + int64_t{col}) * step;
      const Rgb c = shade(image, cell, X, Y);
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
