#include "pipeline/data/preprocess.hpp"

#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>

#include "kernels/core/error.hpp"
#include "pipeline/common/random.hpp"

namespace bigtrain {

Preprocessing Preprocessing::from_config(const Config& config, int channels, bool training) {
  Preprocessing p;
  p.channels = channels;
  const auto& mean = config.data.mean;
  const auto& std = config.data.std;
  BT_CHECK(mean.size() == 1 || static_cast<int>(mean.size()) == channels,
           "data.mean has {} values, the model takes {} channels (give 1 or {})", mean.size(), channels, channels);
  for (int c = 0; c < channels; ++c) {
    p.mean.push_back(static_cast<float>(mean.size() == 1 ? mean[0] : mean[c]));
    p.std.push_back(static_cast<float>(std.size() == 1 ? std[0] : std[c]));
  }
  p.per_tile = config.data.normalize != Normalization::dataset;
  if (config.data.normalize == Normalization::highpass) p.highpass_sigma = config.data.highpass_sigma;
  p.augment = training;
  p.augmentation = config.train.augmentation;
  return p;
}

void preprocess_tile(const cv::Mat& tile, const Preprocessing& p, std::uint64_t seed, float* out, int full_scale) {
  const int depth = tile.depth(), source_channels = tile.channels();
  BT_CHECK(depth == CV_8U || depth == CV_16U, "preprocess: tiles must be 8- or 16-bit, got OpenCV depth {}", depth);
  BT_CHECK(source_channels == 1 || source_channels == 3, "preprocess: tiles must have 1 or 3 channels, got {}",
           source_channels);
  const int rows = tile.rows, cols = tile.cols;
  const std::int64_t plane = static_cast<std::int64_t>(rows) * cols;
  if (full_scale <= 0) full_scale = depth == CV_8U ? 255 : 65535;
  const float unit = 1.0f / static_cast<float>(full_scale);

  // The draws happen in a fixed order whatever is enabled, so turning one
  // augmentation on does not change the others' values.
  SplitMix64 rng(seed);
  const bool flip_x = rng.uniform() < 0.5, flip_y = rng.uniform() < 0.5;
  const int turns = static_cast<int>(rng.below(4));
  const double brightness_draw = rng.uniform(-1.0, 1.0), contrast_draw = rng.uniform(-1.0, 1.0);
  const double rotate_draw = rng.uniform(-1.0, 1.0), scale_draw = rng.uniform(-1.0, 1.0);
  const double shift_x_draw = rng.uniform(-1.0, 1.0), shift_y_draw = rng.uniform(-1.0, 1.0);
  const auto& a = p.augmentation;
  const bool geometric = p.augment && (a.flips || (a.rot90 && rows == cols));
  const bool do_flip_x = p.augment && a.flips && flip_x, do_flip_y = p.augment && a.flips && flip_y;
  const int do_turns = (p.augment && a.rot90 && rows == cols) ? turns : 0;

  auto sample = [&](int y, int x, int c) -> float {
    if (source_channels == 1) {
      return depth == CV_8U ? tile.ptr<std::uint8_t>(y)[x] * unit : tile.ptr<std::uint16_t>(y)[x] * unit;
    }
    if (depth == CV_8U) return tile.ptr<std::uint8_t>(y)[3 * x + c] * unit;
    return tile.ptr<std::uint16_t>(y)[3 * x + c] * unit;
  };
  for (int c = 0; c < p.channels; ++c) {
    float* dst = out + c * plane;
    for (int y = 0; y < rows; ++y) {
      for (int x = 0; x < cols; ++x) {
        int sy = y, sx = x;
        if (geometric) {
          for (int t = 0; t < do_turns; ++t) {  // output (y, x) <- input after t quarter turns
            const int ny = sx, nx = cols - 1 - sy;
            sy = ny;
            sx = nx;
          }
          if (do_flip_x) sx = cols - 1 - sx;
          if (do_flip_y) sy = rows - 1 - sy;
        }
        float v;
        if (source_channels == p.channels) {
          v = sample(sy, sx, c);
        } else if (source_channels == 3) {  // RGB -> grey
          v = 0.299f * sample(sy, sx, 0) + 0.587f * sample(sy, sx, 1) + 0.114f * sample(sy, sx, 2);
        } else {
          v = sample(sy, sx, 0);  // grey -> every channel
        }
        dst[static_cast<std::int64_t>(y) * cols + x] = v;
      }
    }
  }
  const std::int64_t total = plane * p.channels;
  if (p.augment && a.affine()) {
    const cv::Point2f centre(static_cast<float>(cols - 1) / 2.0f, static_cast<float>(rows - 1) / 2.0f);
    cv::Mat transform = cv::getRotationMatrix2D(centre, a.rotate * rotate_draw, 1.0 + a.scale * scale_draw);
    transform.at<double>(0, 2) += a.shift * shift_x_draw * cols;
    transform.at<double>(1, 2) += a.shift * shift_y_draw * rows;
    for (int c = 0; c < p.channels; ++c) {
      cv::Mat pixels(rows, cols, CV_32F, out + c * plane), warped;
      // Reflection keeps the tile's own texture at the borders: a constant fill
      // would mark every transformed tile by its flat corners.
      cv::warpAffine(pixels, warped, transform, pixels.size(), cv::INTER_LINEAR, cv::BORDER_REFLECT_101);
      warped.copyTo(pixels);
    }
  }
  if (p.augment && a.contrast > 0) {
    double sum = 0.0;
    for (std::int64_t i = 0; i < total; ++i) sum += out[i];
    const float mean = static_cast<float>(sum / static_cast<double>(total));
    const float factor = static_cast<float>(1.0 + a.contrast * contrast_draw);
    for (std::int64_t i = 0; i < total; ++i) out[i] = mean + (out[i] - mean) * factor;
  }
  if (p.augment && a.brightness > 0) {
    const float shift = static_cast<float>(a.brightness * brightness_draw);
    for (std::int64_t i = 0; i < total; ++i) out[i] += shift;
  }
  if (p.augment && a.noise > 0) {
    SplitMix64 noise(mix_seed(seed, 0x401537ull));
    for (std::int64_t i = 0; i < total; ++i) out[i] += static_cast<float>(a.noise * noise.normal());
  }
  for (int c = 0; c < p.channels; ++c) {
    float* dst = out + c * plane;
    float mean = p.mean[c], inv_std = 1.0f / p.std[c];
    if (p.highpass_sigma > 0.0) {
      cv::Mat pixels(rows, cols, CV_32F, dst), blurred;
      cv::GaussianBlur(pixels, blurred, cv::Size(0, 0), p.highpass_sigma, p.highpass_sigma, cv::BORDER_REFLECT);
      pixels -= blurred;
    }
    if (p.per_tile) {
      double sum = 0.0, sum_squares = 0.0;
      for (std::int64_t i = 0; i < plane; ++i) {
        sum += dst[i];
        sum_squares += static_cast<double>(dst[i]) * dst[i];
      }
      const double tile_mean = sum / static_cast<double>(plane);
      const double variance = std::max(0.0, sum_squares / static_cast<double>(plane) - tile_mean * tile_mean);
      // A flat tile (empty background) has no contrast to scale up: its noise
      // would become the tile's content. Below a hundredth of full scale it stays
      // as flat as it is.
      mean = static_cast<float>(tile_mean);
      inv_std = static_cast<float>(1.0 / std::max(std::sqrt(variance), kFlatTileStd));
    }
    for (std::int64_t i = 0; i < plane; ++i) dst[i] = (dst[i] - mean) * inv_std;
  }
}

}  // namespace bigtrain
