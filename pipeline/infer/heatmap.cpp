#include "pipeline/infer/heatmap.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include <fmt/format.h>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "kernels/core/error.hpp"
#include "pipeline/common/atomic_file.hpp"
#include "tiler/background.hpp"
#include "tiler/tiff_writer.hpp"

namespace bigtrain {
namespace fs = std::filesystem;
namespace {

cv::Mat colour_lut() {
  cv::Mat ramp(1, 256, CV_8UC1);
  for (int i = 0; i < 256; ++i) ramp.at<std::uint8_t>(0, i) = static_cast<std::uint8_t>(i);
  cv::Mat bgr;
  cv::applyColorMap(ramp, bgr, cv::COLORMAP_JET);
  return bgr;  // 1 x 256, BGR
}

int colour_index(float value, float low, float high) {
  const float span = high > low ? high - low : 1.0f;
  return std::clamp(static_cast<int>(std::lround((value - low) / span * 255.0f)), 0, 255);
}

// Averaged values -> BGR colours; `covered` marks cells some tile lies on.
void colourise(const cv::Mat& averaged, const HeatmapValues& v, cv::Mat& bgr, cv::Mat& covered) {
  static const cv::Mat lut = colour_lut();
  bgr.create(averaged.size(), CV_8UC3);
  covered.create(averaged.size(), CV_8UC1);
  for (int y = 0; y < averaged.rows; ++y)
    for (int x = 0; x < averaged.cols; ++x) {
      const float value = averaged.at<float>(y, x);
      const bool on = !std::isnan(value);
      covered.at<std::uint8_t>(y, x) = on ? 255 : 0;
      bgr.at<cv::Vec3b>(y, x) = on ? lut.at<cv::Vec3b>(0, colour_index(value, v.low, v.high)) : cv::Vec3b(0, 0, 0);
    }
}

void write_png(const std::string& path, const cv::Mat& bgr) {
  std::vector<std::uint8_t> bytes;
  if (!cv::imencode(".png", bgr, bytes)) throw Error(fmt::format("{}: PNG encoding failed", path));
  write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

void check_prediction(const ImagePrediction& prediction, const HeatmapValues& values) {
  BT_CHECK(prediction.ok() && prediction.plan, "heatmap of {}: the prediction has no tile results", prediction.path);
  BT_CHECK(values.values.size() == prediction.tile_results.size(), "heatmap of {}: {} values for {} tiles",
           prediction.path, values.values.size(), prediction.tile_results.size());
}

std::vector<cv::Rect> tile_rects(const ImagePrediction& prediction) {
  std::vector<cv::Rect> rects;
  for (const TileResult& t : prediction.tile_results) rects.push_back(t.rect);
  return rects;
}

}  // namespace

HeatmapValues heatmap_values(const ImagePrediction& prediction, const std::vector<std::string>& classes,
                             bool attention, int class_index) {
  HeatmapValues v;
  if (attention) {
    v.quantity = "attention";
    for (const TileResult& t : prediction.tile_results) v.values.push_back(t.attention);
    v.low = 0.0f;
    v.high = v.values.empty() ? 1.0f : *std::max_element(v.values.begin(), v.values.end());
    return v;
  }
  const int k = class_index >= 0 ? class_index : prediction.top_class;
  BT_CHECK(k >= 0 && k < static_cast<int>(classes.size()), "heatmap: class {} of {}", k, classes.size());
  v.quantity = fmt::format("P({})", classes[static_cast<std::size_t>(k)]);
  for (const TileResult& t : prediction.tile_results) v.values.push_back(t.class_scores[static_cast<std::size_t>(k)]);
  return v;
}

cv::Mat average_tile_values(const std::vector<cv::Rect>& rects, const std::vector<float>& values, int width,
                            int height, double cell_x, double cell_y) {
  BT_CHECK(rects.size() == values.size(), "heatmap: {} tiles, {} values", rects.size(), values.size());
  cv::Mat sum = cv::Mat::zeros(height, width, CV_64F), count = cv::Mat::zeros(height, width, CV_32S);
  const cv::Rect raster(0, 0, width, height);
  for (std::size_t i = 0; i < rects.size(); ++i) {
    const cv::Rect& r = rects[i];
    const int x0 = static_cast<int>(std::lround(r.x / cell_x)), y0 = static_cast<int>(std::lround(r.y / cell_y));
    const int x1 = std::max(x0 + 1, static_cast<int>(std::lround((r.x + r.width) / cell_x)));
    const int y1 = std::max(y0 + 1, static_cast<int>(std::lround((r.y + r.height) / cell_y)));
    const cv::Rect cells = cv::Rect(x0, y0, x1 - x0, y1 - y0) & raster;
    if (cells.empty()) continue;
    sum(cells) += static_cast<double>(values[i]);
    count(cells) += 1;
  }
  cv::Mat mean(height, width, CV_32F);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      const int n = count.at<int>(y, x);
      mean.at<float>(y, x) = n > 0 ? static_cast<float>(sum.at<double>(y, x) / n) : std::nanf("");
    }
  return mean;
}

cv::Vec3b heatmap_colour(float value, float low, float high) {
  static const cv::Mat lut = colour_lut();
  const cv::Vec3b bgr = lut.at<cv::Vec3b>(0, colour_index(value, low, high));
  return {bgr[2], bgr[1], bgr[0]};
}

void write_heatmap_png(const std::string& path, const ImagePrediction& prediction, const HeatmapValues& values,
                       int max_side) {
  check_prediction(prediction, values);
  const ImageTiling& plan = *prediction.plan;
  const tiler::Thumbnail thumbnail = tiler::make_thumbnail(*plan.source, max_side, plan.full_scale);
  cv::Mat background;
  if (thumbnail.pixels.channels() == 1) {
    cv::cvtColor(thumbnail.pixels, background, cv::COLOR_GRAY2BGR);
  } else {
    cv::cvtColor(thumbnail.pixels, background, cv::COLOR_RGB2BGR);
  }
  // Grid pixels -> thumbnail pixels: the grid is level 0 reduced by `downsample`.
  const double cell_x = 1.0 / (plan.sampling.downsample * thumbnail.scale_x);
  const double cell_y = 1.0 / (plan.sampling.downsample * thumbnail.scale_y);
  const cv::Mat averaged =
      average_tile_values(tile_rects(prediction), values.values, background.cols, background.rows, cell_x, cell_y);
  cv::Mat colours, covered;
  colourise(averaged, values, colours, covered);
  cv::Mat blended;
  cv::addWeighted(background, 0.45, colours, 0.55, 0.0, blended);
  cv::Mat overlay = background.clone();
  blended.copyTo(overlay, covered);

  // Legend: a vertical colour bar with the scale's ends and the quantity's name.
  const int bar_width = 24, margin = 12, text_width = 110;
  const int height = std::max(overlay.rows, 160);
  cv::Mat canvas(height, overlay.cols + margin * 3 + bar_width + text_width, CV_8UC3, cv::Scalar(255, 255, 255));
  overlay.copyTo(canvas(cv::Rect(0, 0, overlay.cols, overlay.rows)));
  const int bar_x = overlay.cols + margin, bar_top = 30, bar_bottom = height - 20;
  static const cv::Mat lut = colour_lut();
  for (int y = bar_top; y < bar_bottom; ++y) {
    const int index = 255 - (y - bar_top) * 255 / std::max(1, bar_bottom - bar_top - 1);
    canvas(cv::Rect(bar_x, y, bar_width, 1)).setTo(lut.at<cv::Vec3b>(0, std::clamp(index, 0, 255)));
  }
  const auto font = cv::FONT_HERSHEY_SIMPLEX;
  const cv::Scalar black(0, 0, 0);
  cv::putText(canvas, values.quantity, {overlay.cols + margin, 20}, font, 0.45, black, 1, cv::LINE_AA);
  cv::putText(canvas, fmt::format("{:.3g}", values.high), {bar_x + bar_width + 6, bar_top + 10}, font, 0.4, black, 1,
              cv::LINE_AA);
  cv::putText(canvas, fmt::format("{:.3g}", values.low), {bar_x + bar_width + 6, bar_bottom}, font, 0.4, black, 1,
              cv::LINE_AA);
  write_png(path, canvas);
}

void write_heatmap_tiff(const std::string& path, const ImagePrediction& prediction, const HeatmapValues& values) {
  check_prediction(prediction, values);
  const ImageTiling& plan = *prediction.plan;
  // One pixel per tile step: tile origins and ends fall on multiples of this cell
  // (up to the border policy's last row/column), so overlaps average exactly.
  int cell = plan.tile_size;
  for (const TileResult& t : prediction.tile_results) cell = std::gcd(cell, std::gcd(t.rect.x, t.rect.y));
  cell = std::max(cell, 1);
  const int width = static_cast<int>((plan.sampling.width + cell - 1) / cell);
  const int height = static_cast<int>((plan.sampling.height + cell - 1) / cell);
  const cv::Mat averaged = average_tile_values(tile_rects(prediction), values.values, width, height, cell, cell);

  tiler::TiffWriteOptions options;
  options.width = width;
  options.height = height;
  options.channels = 3;
  options.bigtiff = true;
  options.block_size = 256;  // the file's storage blocks, unrelated to the network's tiles
  options.levels = 1;
  while (std::max(width, height) >> options.levels >= 256) ++options.levels;
  // Each level from the averaged values (not from the colours): mean of the covered
  // cells beneath, so a reduced level shows the same quantity.
  std::vector<cv::Mat> level_colours;
  cv::Mat sum = averaged.clone(), count(averaged.size(), CV_32F);
  for (int y = 0; y < sum.rows; ++y)
    for (int x = 0; x < sum.cols; ++x) {
      const bool on = !std::isnan(sum.at<float>(y, x));
      count.at<float>(y, x) = on ? 1.0f : 0.0f;
      if (!on) sum.at<float>(y, x) = 0.0f;
    }
  for (int level = 0; level < options.levels; ++level) {
    const int w = (width + (1 << level) - 1) >> level, h = (height + (1 << level) - 1) >> level;
    cv::Mat level_sum, level_count;
    cv::resize(sum, level_sum, {w, h}, 0, 0, cv::INTER_AREA);
    cv::resize(count, level_count, {w, h}, 0, 0, cv::INTER_AREA);
    cv::Mat mean(h, w, CV_32F);
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x) {
        const float c = level_count.at<float>(y, x);
        mean.at<float>(y, x) = c > 1e-6f ? level_sum.at<float>(y, x) / c : std::nanf("");
      }
    cv::Mat bgr, covered, rgb;
    colourise(mean, values, bgr, covered);
    cv::cvtColor(bgr, rgb, cv::COLOR_BGR2RGB);
    level_colours.push_back(rgb);
  }
  tiler::write_tiff(path, options, [&](int level, const cv::Rect& block, cv::Mat& pixels) {
    const cv::Mat& source = level_colours[static_cast<std::size_t>(level)];
    pixels.setTo(cv::Scalar::all(0));
    const cv::Rect inside = block & cv::Rect(0, 0, source.cols, source.rows);
    if (!inside.empty()) source(inside).copyTo(pixels(cv::Rect(inside.x - block.x, inside.y - block.y, inside.width,
                                                                 inside.height)));
  });
}

std::string heatmap_path_for(const std::string& base, const std::string& image_path, bool many) {
  if (!many) return base;
  const fs::path b(base);
  return (b.parent_path() / fmt::format("{}_{}{}", b.stem().string(), fs::path(image_path).stem().string(),
                                        b.extension().string()))
      .string();
}

}  // namespace bigtrain
