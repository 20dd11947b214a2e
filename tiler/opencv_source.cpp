#include "tiler/opencv_source.hpp"

#include <filesystem>
#include <fstream>
#include <vector>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "kernels/core/error.hpp"

namespace bigtrain::tiler {
namespace {

// OpenCV's own ceiling on decoded pixels (CV_IO_MAX_IMAGE_PIXELS); checking it
// here gives a clear error before any decode is attempted.
constexpr int64_t kMaxWholePixels = int64_t{1} << 30;

struct Header {
  int64_t width = 0, height = 0;
  int channels = 0, bits = 0;
};

uint32_t big_endian(const unsigned char* p, int bytes) {
  uint32_t value = 0;
  for (int i = 0; i < bytes; ++i) value = (value << 8) | p[i];
  return value;
}

uint32_t little_endian(const unsigned char* p, int bytes) {
  uint32_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | p[i];
  return value;
}

[[noreturn]] void fail(const std::string& path, const std::string& why) { throw Error(fmt::format("{}: {}", path, why)); }

Header read_png_header(const std::string& path, std::ifstream& in) {
  unsigned char b[33];
  if (!in.read(reinterpret_cast<char*>(b), sizeof b) || std::string(reinterpret_cast<char*>(b + 12), 4) != "IHDR")
    fail(path, "truncated or corrupt PNG header");
  Header h;
  h.width = big_endian(b + 16, 4);
  h.height = big_endian(b + 20, 4);
  const int depth = b[24], color = b[25];
  if (color == 3) {  // palette: OpenCV expands it to 8-bit RGB exactly
    h.channels = 3;
    h.bits = 8;
    return h;
  }
  if (depth != 8 && depth != 16) fail(path, fmt::format("{}-bit PNG is not supported (8- or 16-bit only)", depth));
  h.bits = depth;
  h.channels = (color == 0 || color == 4) ? 1 : 3;
  return h;
}

Header read_jpeg_header(const std::string& path, std::ifstream& in) {
  unsigned char marker[4];
  in.seekg(2);
  while (in.read(reinterpret_cast<char*>(marker), 2)) {
    if (marker[0] != 0xFF) fail(path, "corrupt JPEG: expected a marker");
    const int type = marker[1];
    if (type == 0xFF) {  // fill byte before a marker
      in.seekg(-1, std::ios::cur);
      continue;
    }
    if (type == 0xD8 || (type >= 0xD0 && type <= 0xD7) || type == 0x01) continue;
    if (!in.read(reinterpret_cast<char*>(marker + 2), 2)) break;
    const int length = static_cast<int>(big_endian(marker + 2, 2));
    if (length < 2) fail(path, "corrupt JPEG: segment length below 2");
    const bool start_of_frame = type >= 0xC0 && type <= 0xCF && type != 0xC4 && type != 0xC8 && type != 0xCC;
    if (start_of_frame) {
      unsigned char frame[6];
      if (!in.read(reinterpret_cast<char*>(frame), sizeof frame)) break;
      Header h;
      if (frame[0] != 8) fail(path, fmt::format("{}-bit JPEG is not supported (8-bit only)", int{frame[0]}));
      h.bits = 8;
      h.height = big_endian(frame + 1, 2);
      h.width = big_endian(frame + 3, 2);
      if (frame[5] == 4) fail(path, "CMYK JPEG is not supported; convert to RGB first");
      h.channels = frame[5] == 1 ? 1 : 3;
      return h;
    }
    in.seekg(length - 2, std::ios::cur);
  }
  fail(path, "truncated or corrupt JPEG: no frame header found");
}

Header read_bmp_header(const std::string& path, std::ifstream& in) {
  unsigned char b[30];
  if (!in.read(reinterpret_cast<char*>(b), sizeof b)) fail(path, "truncated BMP header");
  Header h;
  h.width = static_cast<int32_t>(little_endian(b + 18, 4));
  h.height = std::abs(static_cast<int64_t>(static_cast<int32_t>(little_endian(b + 22, 4))));  // negative = top-down
  // OpenCV decodes every BMP depth (palettes included) to 8-bit colour.
  h.channels = 3;
  h.bits = 8;
  return h;
}

}  // namespace

OpenCvSource::OpenCvSource(const std::string& path, const std::string& format) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  Header h = format == "png" ? read_png_header(path, in) : format == "jpeg" ? read_jpeg_header(path, in) : read_bmp_header(path, in);
  if (h.width <= 0 || h.height <= 0) fail(path, fmt::format("the header declares an invalid size {}x{}", h.width, h.height));
  // A compressed stream cannot expand beyond its format's ratio limit (Deflate:
  // 1032:1; BMP's RLE: 128:1; JPEG: no hard limit, so a generous 4096:1), so a tiny
  // file declaring a huge image is refused before OpenCV allocates for it.
  // Each side is bounded before any product is formed, so no size arithmetic can
  // overflow (a fuzzed BMP declared 3.5e18 pixels a side).
  if (h.width > kMaxWholePixels || h.height > kMaxWholePixels || h.width * h.height > kMaxWholePixels)
    fail(path, fmt::format("{}x{} is too large to decode whole as {} (at most {} pixels); convert it to a tiled TIFF",
                           h.width, h.height, format, kMaxWholePixels));
  std::error_code ec;
  const int64_t file_bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  const int64_t max_ratio = format == "png" ? 1100 : format == "bmp" ? 300 : 4096;
  const int64_t declared_bytes = h.width * h.height * h.channels * (h.bits / 8);
  if (!ec && declared_bytes > file_bytes * max_ratio + (1 << 20))
    fail(path, fmt::format("the header declares {}x{} but the file has only {} bytes: truncated or corrupt {}", h.width,
                           h.height, file_bytes, format));
  info_.path = path;
  info_.format = format;
  info_.channels = h.channels;
  info_.bits = h.bits;
  info_.photometric = h.channels == 1 ? "min-is-black" : "rgb";
  LevelInfo level;
  level.width = h.width;
  level.height = h.height;
  level.layout = Layout::whole;
  level.block_width = static_cast<int>(h.width);
  level.block_height = static_cast<int>(h.height);
  level.compression = format;
  info_.levels.push_back(level);
}

const cv::Mat& OpenCvSource::decoded() const {
  std::call_once(decode_once_, [this] {
    const int flags = cv::IMREAD_ANYDEPTH | (info_.channels == 1 ? cv::IMREAD_GRAYSCALE : cv::IMREAD_COLOR);
    cv::Mat image = cv::imread(info_.path, flags);
    if (image.empty()) fail(info_.path, fmt::format("OpenCV cannot decode this {} (truncated or corrupt)", info_.format));
    if (image.cols != info_.width() || image.rows != info_.height() || image.type() != info_.cv_type())
      fail(info_.path, fmt::format("decoded {}x{} type {} does not match its header {}x{}", image.cols, image.rows,
                                   image.type(), info_.width(), info_.height()));
    if (image.channels() == 3) cv::cvtColor(image, image, cv::COLOR_BGR2RGB);
    pixels_ = image;
  });
  return pixels_;
}

cv::Mat OpenCvSource::read_region(int level, int64_t x, int64_t y, int64_t w, int64_t h) const {
  check_region(info_, level, x, y, w, h);
  return decoded()(cv::Rect(static_cast<int>(x), static_cast<int>(y), static_cast<int>(w), static_cast<int>(h))).clone();
}

}  // namespace bigtrain::tiler
