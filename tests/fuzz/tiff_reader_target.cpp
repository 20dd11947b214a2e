// Fuzz target for the image reader: the input bytes become a file, which is opened
// with open_image (header only; every format), described, and, for TIFF and BigTIFF,
// read back at a few regions of every level: whole small levels, the corners of
// large ones, and one region placed by a hash of the input so different inputs
// probe different blocks.
//
// Invariants checked beyond "no crash": every failure is a bigtrain::Error naming
// the file; a successful read returns exactly the requested size and pixel type.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "tests/fuzz/fuzz_target.hpp"
#include "tiler/image_source.hpp"

namespace {

namespace fs = std::filesystem;
using bigtrain::tiler::ImageInfo;
using bigtrain::tiler::ImageSource;

// One scratch file per process, reused for every input (libFuzzer runs millions).
class ScratchFile {
 public:
  ScratchFile() {
    dir_ = fs::temp_directory_path() / fmt::format("bigtrain-fuzz-tiff-{}", ::getpid());
    fs::create_directories(dir_);
    path_ = (dir_ / "input.tif").string();
  }
  ~ScratchFile() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  const std::string& write(const std::uint8_t* data, std::size_t size) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    if (!out) bigtrain_fuzz_fail("cannot write the scratch file", path_.c_str());
    return path_;
  }

 private:
  fs::path dir_;
  std::string path_;
};

void expect_names_file(const bigtrain::Error& error, const std::string& path) {
  if (std::string(error.what()).find(path) == std::string::npos)
    bigtrain_fuzz_fail("a bigtrain::Error does not name the file", error.what());
}

std::uint64_t fnv1a(const std::uint8_t* data, std::size_t size) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 0x100000001b3ull;
  return h;
}

void read_checked(const ImageSource& source, const std::string& path, int level, int64_t x, int64_t y, int64_t w,
                  int64_t h) {
  try {
    const cv::Mat pixels = source.read_region(level, x, y, w, h);
    if (pixels.cols != w || pixels.rows != h || pixels.type() != source.info().cv_type())
      bigtrain_fuzz_fail("read_region returned the wrong size or type",
                         fmt::format("level {} region {},{} {}x{}: got {}x{} type {}", level, x, y, w, h, pixels.cols,
                                     pixels.rows, pixels.type())
                             .c_str());
  } catch (const bigtrain::Error& error) {
    expect_names_file(error, path);
  }
}

void check_info(const ImageInfo& info) {
  if (info.levels.empty()) bigtrain_fuzz_fail("open_image succeeded with no levels", info.path.c_str());
  if ((info.channels != 1 && info.channels != 3) || (info.bits != 8 && info.bits != 16))
    bigtrain_fuzz_fail("unsupported pixel format passed open_image",
                       fmt::format("{} channels, {} bits", info.channels, info.bits).c_str());
  for (const auto& level : info.levels)
    if (level.width <= 0 || level.height <= 0)
      bigtrain_fuzz_fail("a level has no pixels", fmt::format("{}x{}", level.width, level.height).c_str());
}

}  // namespace

int bigtrain_fuzz_one_input(const std::uint8_t* data, std::size_t size) {
  static ScratchFile scratch;
  const std::string& path = scratch.write(data, size);
  std::unique_ptr<ImageSource> source;
  try {
    source = bigtrain::tiler::open_image(path);
  } catch (const bigtrain::Error& error) {
    expect_names_file(error, path);
    return 0;
  }
  const ImageInfo& info = source->info();
  check_info(info);
  // PNG/JPEG/BMP headers are parsed by bigtrain (fuzzed above), but their pixels are
  // decoded whole by OpenCV, which allocates the declared size (up to 2^30 pixels)
  // before it finds the data missing: a known limit of whole-image formats
  // (tests/fuzz/README.md), not something fuzzing should rediscover every run.
  if (info.format != "tiff" && info.format != "bigtiff") return 0;
  // Regions stay small: the reader's bounds on block sizes are what is under test,
  // not how fast it fills a large region.
  constexpr int64_t kWholeLevelPixels = 256 * 256, kCorner = 64, kProbe = 96;
  const std::uint64_t hash = fnv1a(data, size);
  const int levels = static_cast<int>(std::min<std::size_t>(info.levels.size(), 6));
  for (int level = 0; level < levels; ++level) {
    const int64_t w = info.levels[level].width, h = info.levels[level].height;
    if (w * h <= kWholeLevelPixels) {
      read_checked(*source, path, level, 0, 0, w, h);
      continue;
    }
    const int64_t cw = std::min(w, kCorner), ch = std::min(h, kCorner);
    read_checked(*source, path, level, 0, 0, cw, ch);
    read_checked(*source, path, level, w - cw, h - ch, cw, ch);
    const int64_t pw = std::min(w, kProbe), ph = std::min(h, kProbe);
    const auto px = static_cast<int64_t>(hash % static_cast<std::uint64_t>(w - pw + 1));
    const auto py = static_cast<int64_t>((hash >> 32) % static_cast<std::uint64_t>(h - ph + 1));
    read_checked(*source, path, level, px, py, pw, ph);
  }
  // A region reaching outside the image must be refused, not read.
  try {
    source->read_region(0, info.width() - 1, 0, 2, 1);
    bigtrain_fuzz_fail("read_region accepted a region outside the image", path.c_str());
  } catch (const bigtrain::Error& error) {
    expect_names_file(error, path);
  }
  return 0;
}
