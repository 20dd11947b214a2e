#pragma once
// ImageSource over PNG, JPEG and BMP through OpenCV. These formats are one
// compressed stream, so the first read decodes the whole image once and keeps it
// (opening still reads only the header); sizes are checked before that decode.
#include <mutex>
#include <string>

#include "tiler/image_source.hpp"

namespace bigtrain::tiler {

class OpenCvSource final : public ImageSource {
 public:
  // `format` is "png", "jpeg" or "bmp", as found from the magic bytes.
  OpenCvSource(const std::string& path, const std::string& format);

  const ImageInfo& info() const override { return info_; }
  cv::Mat read_region(int level, int64_t x, int64_t y, int64_t w, int64_t h) const override;

 private:
  const cv::Mat& decoded() const;

  ImageInfo info_;
  mutable std::once_flag decode_once_;
  mutable cv::Mat pixels_;  // RGB order, as every source reports
};

}  // namespace bigtrain::tiler
