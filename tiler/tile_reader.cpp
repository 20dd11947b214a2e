#include "tiler/tile_reader.hpp"

#include <cmath>

#include <opencv2/imgproc.hpp>

#include "kernels/core/error.hpp"

namespace bigtrain::tiler {

Sampling sampling_at_level(const ImageInfo& info, int level) {
  if (level < 0 || level >= static_cast<int>(info.levels.size()))
    throw Error(fmt::format("{}: level {} does not exist (the image has {} level(s))", info.path, level, info.levels.size()));
  const LevelInfo& L = info.levels[level];
  Sampling s;
  s.level = level;
  s.width = L.width;
  s.height = L.height;
  s.downsample = L.downsample;
  return s;
}

Sampling sampling_at_downsample(const ImageInfo& info, double factor) {
  if (!(factor >= 1.0) || !std::isfinite(factor))
    throw Error(fmt::format("{}: downsample factor must be at least 1, got {}", info.path, factor));
  int best = 0;
  for (int i = 0; i < static_cast<int>(info.levels.size()); ++i)
    // The tolerance absorbs the rounding of odd level sizes (ceil(w/2) etc.).
    if (info.levels[i].downsample <= factor * (1 + 1e-9) && info.levels[i].downsample > info.levels[best].downsample) best = i;
  const LevelInfo& L = info.levels[best];
  Sampling s;
  s.level = best;
  s.width = std::max<int64_t>(1, std::llround(static_cast<double>(info.width()) / factor));
  s.height = std::max<int64_t>(1, std::llround(static_cast<double>(info.height()) / factor));
  s.scale_x = static_cast<double>(L.width) / static_cast<double>(s.width);
  s.scale_y = static_cast<double>(L.height) / static_cast<double>(s.height);
  // Reading the level exactly as stored needs no interpolation (and is exact).
  if (s.width == L.width && s.height == L.height) s.scale_x = s.scale_y = 1.0;
  s.downsample = factor;
  return s;
}

cv::Mat read_tile(const ImageSource& source, const Sampling& sampling, const cv::Rect& rect, double pad_value) {
  const ImageInfo& info = source.info();
  const cv::Rect inside = rect & cv::Rect(0, 0, static_cast<int>(sampling.width), static_cast<int>(sampling.height));
  cv::Mat pixels;
  if (!inside.empty()) {
    if (!sampling.resampled()) {
      pixels = source.read_region(sampling.level, inside.x, inside.y, inside.width, inside.height);
    } else {
      const LevelInfo& L = info.levels.at(sampling.level);
      const int64_t x0 = static_cast<int64_t>(std::floor(inside.x * sampling.scale_x));
      const int64_t y0 = static_cast<int64_t>(std::floor(inside.y * sampling.scale_y));
      const int64_t x1 = std::min<int64_t>(L.width, static_cast<int64_t>(std::ceil(inside.br().x * sampling.scale_x)));
      const int64_t y1 = std::min<int64_t>(L.height, static_cast<int64_t>(std::ceil(inside.br().y * sampling.scale_y)));
      cv::Mat level_pixels = source.read_region(sampling.level, x0, y0, std::max<int64_t>(1, x1 - x0), std::max<int64_t>(1, y1 - y0));
      cv::resize(level_pixels, pixels, inside.size(), 0, 0, cv::INTER_AREA);
    }
    if (inside == rect) return pixels;
  }
  cv::Mat tile(rect.size(), info.cv_type(), cv::Scalar::all(pad_value));
  if (!inside.empty()) pixels.copyTo(tile(cv::Rect(inside.tl() - rect.tl(), inside.size())));
  return tile;
}

}  // namespace bigtrain::tiler
