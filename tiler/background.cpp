#include "tiler/background.hpp"

#include <cmath>
#include <numeric>
#include <vector>

#include <opencv2/imgproc.hpp>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "kernels/core/error.hpp"

namespace bigtrain::tiler {
namespace {

// Chunk side along one axis: a multiple of k (so chunks map to whole thumbnail
// pixels) and, where cheap, of the storage block (so no block is decoded twice).
int64_t chunk_side(int64_t block, int64_t k, int64_t target) {
  const int64_t both = std::lcm(block, k);
  const int64_t unit = both <= 4 * target ? both : k;
  return unit * std::max<int64_t>(1, target / unit);
}

cv::Mat to_8bit(const cv::Mat& pixels, int full_scale) {
  if (pixels.depth() == CV_8U && full_scale == 255) return pixels;
  cv::Mat out;
  // convertTo saturates: values above a declared maximum become white, not wrap.
  pixels.convertTo(out, CV_MAKETYPE(CV_8U, pixels.channels()), 255.0 / full_scale);
  return out;
}

// Median of a histogram of non-negative integer values.
int histogram_median(const std::vector<int64_t>& counts, int64_t total) {
  int64_t seen = 0;
  for (size_t v = 0; v < counts.size(); ++v) {
    seen += counts[v];
    if (2 * seen >= total) return static_cast<int>(v);
  }
  return static_cast<int>(counts.size()) - 1;
}

ForegroundMask local_contrast_mask(const cv::Mat& grey, const ForegroundOptions& options) {
  ForegroundMask out;
  out.mode = BackgroundMode::local_contrast;
  // A little smoothing first: single-pixel noise must not pass for objects, and the
  // noise level below is measured on the same smoothed image.
  cv::Mat smooth;
  cv::GaussianBlur(grey, smooth, cv::Size(0, 0), 1.0);
  // The local background level: a median over an eighth of the image's side,
  // computed at about 128 pixels a side (cheap). Objects smaller than half the window
  // do not move the median, so they stand out of it; brightness texture much wider
  // than the window is followed by it (a wider window would lag behind the texture:
  // at a dark trough the median sits above the floor, and the trough passes for
  // dark objects).
  const int longer = std::max(grey.cols, grey.rows);
  const double shrink = std::max(1.0, longer / 128.0);
  cv::Mat small, level;
  cv::resize(smooth, small, cv::Size(std::max(1, static_cast<int>(std::lround(grey.cols / shrink))),
                                     std::max(1, static_cast<int>(std::lround(grey.rows / shrink)))),
             0, 0, cv::INTER_AREA);
  const int window = std::max(3, (std::max(small.cols, small.rows) / 8) | 1);
  cv::medianBlur(small, level, window);
  cv::resize(level, level, grey.size(), 0, 0, cv::INTER_LINEAR);
  cv::Mat departure;  // signed: towards the foreground's side is positive
  if (options.dark_foreground) cv::subtract(level, smooth, departure, cv::noArray(), CV_16S);
  else cv::subtract(smooth, level, departure, cv::noArray(), CV_16S);
  // The noise of the departure from its median absolute value (robust while
  // objects cover less than half the image); the cut sits 5 noise sigmas out, and
  // at least 3 grey levels so an almost flat image keeps only real objects.
  std::vector<int64_t> counts(256, 0);
  for (int r = 0; r < departure.rows; ++r) {
    const int16_t* row = departure.ptr<int16_t>(r);
    for (int c = 0; c < departure.cols; ++c) ++counts[std::min(255, std::abs(row[c]))];
  }
  const double sigma = 1.4826 * histogram_median(counts, static_cast<int64_t>(departure.total()));
  if (options.threshold) {
    BT_CHECK(*options.threshold >= 1 && *options.threshold <= 255,
             "local-contrast threshold must be in 1..255 grey levels, got {}", *options.threshold);
    out.threshold = *options.threshold;
  } else {
    out.threshold = std::max(3, static_cast<int>(std::ceil(5.0 * sigma)));
  }
  cv::compare(departure, out.threshold, out.mask, cv::CMP_GE);
  out.mask /= 255;  // compare writes 255
  return out;
}

}  // namespace

std::optional<BackgroundMode> parse_background_mode(const std::string& name) {
  if (name == "otsu") return BackgroundMode::otsu;
  if (name == "fixed") return BackgroundMode::fixed;
  if (name == "local_contrast") return BackgroundMode::local_contrast;
  if (name == "none") return BackgroundMode::none;
  return std::nullopt;
}

const char* background_mode_name(BackgroundMode mode) {
  switch (mode) {
    case BackgroundMode::otsu: return "otsu";
    case BackgroundMode::fixed: return "fixed";
    case BackgroundMode::local_contrast: return "local_contrast";
    case BackgroundMode::none: return "none";
  }
  return "?";
}

Thumbnail make_thumbnail(const ImageSource& source, int max_side, int full_scale) {
  BT_CHECK(max_side > 0, "thumbnail size must be positive, got {}", max_side);
  const ImageInfo& info = source.info();
  if (full_scale <= 0) full_scale = info.full_scale();
  const int level = static_cast<int>(info.levels.size()) - 1;
  const LevelInfo& L = info.levels[level];
  const int64_t k = std::max<int64_t>(1, (std::max(L.width, L.height) + max_side - 1) / max_side);
  const int64_t out_w = (L.width + k - 1) / k, out_h = (L.height + k - 1) / k;
  Thumbnail thumb;
  thumb.pixels.create(static_cast<int>(out_h), static_cast<int>(out_w), CV_MAKETYPE(CV_8U, info.channels));
  thumb.scale_x = static_cast<double>(out_w) / static_cast<double>(info.width());
  thumb.scale_y = static_cast<double>(out_h) / static_cast<double>(info.height());

  // Chunks of about 1024 level pixels a side; strips are decoded whole, so striped
  // chunks span the full width (rows bounded to keep a chunk near 32 MB).
  int64_t chunk_w, chunk_h;
  if (L.layout == Layout::striped) {
    chunk_w = L.width;
    const int64_t row_bytes = L.width * info.channels * (info.bits / 8);
    chunk_h = chunk_side(L.block_height, k, std::max<int64_t>(k, (int64_t{32} << 20) / row_bytes));
  } else {
    const int64_t block_w = L.layout == Layout::tiled ? L.block_width : 1024;
    const int64_t block_h = L.layout == Layout::tiled ? L.block_height : 1024;
    chunk_w = chunk_side(block_w, k, 1024);
    chunk_h = chunk_side(block_h, k, 1024);
  }
  const int64_t chunks_x = (L.width + chunk_w - 1) / chunk_w, chunks_y = (L.height + chunk_h - 1) / chunk_h;
  // A few chunks in flight keep memory bounded however many cores there are.
  tbb::task_arena arena(std::min(4, tbb::this_task_arena::max_concurrency()));
  arena.execute([&] {
    tbb::parallel_for(int64_t{0}, chunks_x * chunks_y, [&](int64_t index) {
      const int64_t x = (index % chunks_x) * chunk_w, y = (index / chunks_x) * chunk_h;
      const int64_t w = std::min(chunk_w, L.width - x), h = std::min(chunk_h, L.height - y);
      cv::Mat chunk = to_8bit(source.read_region(level, x, y, w, h), full_scale);
      const cv::Rect target(static_cast<int>(x / k), static_cast<int>(y / k), static_cast<int>((w + k - 1) / k),
                            static_cast<int>((h + k - 1) / k));
      cv::Mat small;
      if (k == 1) small = chunk;
      else cv::resize(chunk, small, target.size(), 0, 0, cv::INTER_AREA);
      small.copyTo(thumb.pixels(target));
    });
  });
  return thumb;
}

ForegroundMask foreground_mask(const Thumbnail& thumbnail, const ForegroundOptions& options) {
  BT_CHECK(!thumbnail.pixels.empty() && thumbnail.pixels.depth() == CV_8U, "the thumbnail must be a non-empty 8-bit image");
  cv::Mat grey;
  if (thumbnail.pixels.channels() == 3) cv::cvtColor(thumbnail.pixels, grey, cv::COLOR_RGB2GRAY);
  else grey = thumbnail.pixels;
  ForegroundMask out;
  out.mode = options.mode;
  if (options.mode == BackgroundMode::none) {
    out.mask = cv::Mat::ones(grey.size(), CV_8U);
    return out;
  }
  BT_CHECK(options.mode != BackgroundMode::fixed || options.threshold.has_value(),
           "background mode fixed needs a threshold (a grey level 0..255)");
  const int type = options.dark_foreground ? cv::THRESH_BINARY_INV : cv::THRESH_BINARY;
  if (options.threshold && options.mode != BackgroundMode::local_contrast) {
    out.mode = BackgroundMode::fixed;
    BT_CHECK(*options.threshold >= 0 && *options.threshold <= 255, "foreground threshold must be in 0..255, got {}",
             *options.threshold);
    out.threshold = *options.threshold;
    // Dark foreground is grey <= threshold; bright foreground is grey > threshold.
    cv::threshold(grey, out.mask, out.threshold, 1, type);
    return out;
  }
  double lo = 0, hi = 0;
  cv::minMaxLoc(grey, &lo, &hi);
  if (lo == hi) {
    // Otsu has nothing to separate; dropping the whole image would be a silent surprise.
    out.uniform = true;
    out.threshold = static_cast<int>(lo);
    out.mask = cv::Mat::ones(grey.size(), CV_8U);
    return out;
  }
  if (options.mode == BackgroundMode::local_contrast) return local_contrast_mask(grey, options);
  // Otsu's cut is chosen on a blurred copy: nuclei-like dark texture inside tissue
  // would otherwise become a class of its own and pull the cut below the rest of
  // the tissue. The cut is then applied to the sharp thumbnail, keeping edges exact.
  cv::Mat blurred, unused;
  cv::GaussianBlur(grey, blurred, cv::Size(0, 0), 2.0);
  out.threshold = static_cast<int>(cv::threshold(blurred, unused, 0, 1, type | cv::THRESH_OTSU));
  cv::threshold(grey, out.mask, out.threshold, 1, type);
  return out;
}

double foreground_fraction(const ForegroundMask& mask, const Sampling& sampling, const cv::Rect& rect) {
  // The mask covers the whole image, as the grid does.
  const double sx = static_cast<double>(mask.mask.cols) / static_cast<double>(sampling.width);
  const double sy = static_cast<double>(mask.mask.rows) / static_cast<double>(sampling.height);
  const double x0 = rect.x * sx, x1 = rect.br().x * sx, y0 = rect.y * sy, y1 = rect.br().y * sy;
  // Whole mask pixels touched by the rect; at least one, so tiny tiles still get a say.
  int64_t mx0 = static_cast<int64_t>(std::floor(x0)), my0 = static_cast<int64_t>(std::floor(y0));
  int64_t mx1 = std::max<int64_t>(mx0 + 1, static_cast<int64_t>(std::ceil(x1)));
  int64_t my1 = std::max<int64_t>(my0 + 1, static_cast<int64_t>(std::ceil(y1)));
  const double area = static_cast<double>((mx1 - mx0) * (my1 - my0));
  const cv::Rect clipped = cv::Rect(static_cast<int>(mx0), static_cast<int>(my0), static_cast<int>(mx1 - mx0),
                                    static_cast<int>(my1 - my0)) &
                           cv::Rect(0, 0, mask.mask.cols, mask.mask.rows);
  if (clipped.empty()) return 0.0;
  return static_cast<double>(cv::countNonZero(mask.mask(clipped))) / area;
}

}  // namespace bigtrain::tiler
