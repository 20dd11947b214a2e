#include "tiler/image_writer.hpp"

#include <unistd.h>

#include <filesystem>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "kernels/core/error.hpp"

namespace bigtrain::tiler {

void write_image_file(const std::string& path_string, const cv::Mat& pixels) {
  const std::filesystem::path path(path_string);
  cv::Mat bgr;  // a fresh Mat: converting into a header of `pixels` would overwrite them
  if (pixels.channels() == 3) cv::cvtColor(pixels, bgr, cv::COLOR_RGB2BGR);
  else bgr = pixels;
  // The temporary keeps the extension: imwrite picks the encoder from it.
  const std::filesystem::path temporary =
      path.parent_path() / fmt::format(".{}.tmp-{}{}", path.stem().string(), ::getpid(), path.extension().string());
  bool ok = false;
  try {
    ok = cv::imwrite(temporary.string(), bgr);
  } catch (const cv::Exception& e) {
    std::filesystem::remove(temporary);
    throw Error(fmt::format("{}: cannot write image: {}", path_string, e.what()));
  }
  if (!ok) throw Error(fmt::format("{}: cannot write image (unknown extension or unwritable folder)", path_string));
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    std::filesystem::remove(temporary, ec);
    throw Error(fmt::format("{}: cannot move the written image into place: {}", path_string, ec.message()));
  }
}

}  // namespace bigtrain::tiler
