#pragma once
// Writes a whole (small) image with OpenCV: tile dumps, previews, thumbnails.
#include <string>

#include <opencv2/core.hpp>

namespace bigtrain::tiler {

// `pixels` in the tiler's RGB order (converted to OpenCV's BGR here); the format
// follows the extension (.png is lossless, 8- or 16-bit as given). Written under a
// temporary name and renamed. Throws bigtrain::Error naming the path on failure.
void write_image_file(const std::string& path, const cv::Mat& pixels);

}  // namespace bigtrain::tiler
