#include "tiler/image_source.hpp"

#include <cstring>
#include <fstream>

#include "kernels/core/error.hpp"
#include "tiler/opencv_source.hpp"
#include "tiler/tiff_source.hpp"

namespace bigtrain::tiler {

int ImageInfo::cv_type() const { return CV_MAKETYPE(bits == 16 ? CV_16U : CV_8U, channels); }

int ImageInfo::full_scale() const { return max_value > 0 ? max_value : (1 << bits) - 1; }

void check_region(const ImageInfo& info, int level, int64_t x, int64_t y, int64_t w, int64_t h) {
  if (level < 0 || level >= static_cast<int>(info.levels.size()))
    throw Error(fmt::format("{}: level {} does not exist (the image has {} level(s))", info.path, level, info.levels.size()));
  const LevelInfo& L = info.levels[level];
  if (w <= 0 || h <= 0 || x < 0 || y < 0 || x > L.width - w || y > L.height - h)
    throw Error(fmt::format("{}: region x={} y={} w={} h={} is not inside level {} ({}x{})", info.path, x, y, w, h,
                            level, L.width, L.height));
  const int64_t bytes = w * h * info.channels * (info.bits / 8);
  if (bytes > kMaxRegionBytes)
    throw Error(fmt::format("{}: region {}x{} needs {} bytes, more than the {} one read may allocate; read it in tiles",
                            info.path, w, h, bytes, kMaxRegionBytes));
}

std::unique_ptr<ImageSource> open_image(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  unsigned char magic[8] = {};
  in.read(reinterpret_cast<char*>(magic), sizeof magic);
  const std::streamsize got = in.gcount();
  if (got == 0) throw Error(fmt::format("{}: the file is empty", path));
  auto starts_with = [&](std::initializer_list<unsigned char> prefix) {
    return got >= static_cast<std::streamsize>(prefix.size()) && std::equal(prefix.begin(), prefix.end(), magic);
  };
  if (starts_with({'I', 'I', 42, 0}) || starts_with({'M', 'M', 0, 42}) || starts_with({'I', 'I', 43, 0}) ||
      starts_with({'M', 'M', 0, 43}))
    return std::make_unique<TiffSource>(path);
  if (starts_with({0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'})) return std::make_unique<OpenCvSource>(path, "png");
  if (starts_with({0xFF, 0xD8, 0xFF})) return std::make_unique<OpenCvSource>(path, "jpeg");
  if (starts_with({'B', 'M'})) return std::make_unique<OpenCvSource>(path, "bmp");
  throw Error(fmt::format("{}: not a supported image: its first bytes match no TIFF, BigTIFF, PNG, JPEG or BMP signature", path));
}

}  // namespace bigtrain::tiler
