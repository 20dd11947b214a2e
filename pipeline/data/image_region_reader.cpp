#include "pipeline/data/image_region_reader.hpp"

#include <fmt/format.h>

#include "kernels/core/error.hpp"

namespace bigtrain {

ImageRegionReader::ImageRegionReader(const std::string& path, const TilerConfig& tiler, Preprocessing preprocessing,
                                     std::int64_t max_value)
    : path_(path), source_(tiler::open_image(path)), preprocessing_(std::move(preprocessing)) {
  preprocessing_.augment = false;
  const tiler::ImageInfo& info = source_->info();
  full_scale_ = max_value > 0 ? static_cast<int>(max_value) : info.full_scale();
  if (tiler.level > 0 && tiler.downsample > 1.0)
    throw Error(fmt::format("{}: set tiler.level or tiler.downsample, not both", path));
  sampling_ = tiler.downsample > 1.0 ? tiler::sampling_at_downsample(info, tiler.downsample)
                                     : tiler::sampling_at_level(info, static_cast<int>(tiler.level));
}

Shape ImageRegionReader::image_shape() const {
  return {1, preprocessing_.channels, sampling_.height, sampling_.width};
}

Tensor ImageRegionReader::read(const net::Window& region) {
  BT_CHECK(region.y >= 0 && region.x >= 0 && region.height > 0 && region.width > 0 &&
               region.y + region.height <= sampling_.height && region.x + region.width <= sampling_.width,
           "{}: region {}x{} at ({}, {}) is not inside the image's {}x{} pixels", path_, region.height, region.width,
           region.y, region.x, sampling_.height, sampling_.width);
  const cv::Rect rect(static_cast<int>(region.x), static_cast<int>(region.y), static_cast<int>(region.width),
                      static_cast<int>(region.height));
  const cv::Mat pixels = tiler::read_tile(*source_, sampling_, rect);
  Tensor out = Tensor::empty({1, preprocessing_.channels, region.height, region.width}, DType::f32);
  preprocess_tile(pixels, preprocessing_, 0, out.data<float>(), full_scale_);
  pixels_read_ += region.height * region.width;
  return out;
}

}  // namespace bigtrain
