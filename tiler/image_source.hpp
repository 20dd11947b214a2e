#pragma once
// Lazy access to large images. Opening reads the header only; read_region decodes
// only the storage blocks (TIFF tiles or strips) that intersect the region, so an
// image far larger than memory can be walked tile by tile.
//
// Pixel convention for every source: a cv::Mat of CV_8UC1, CV_8UC3, CV_16UC1 or
// CV_16UC3, channels in RGB order (not OpenCV's BGR), brighter = higher (TIFF
// MinIsWhite is inverted on read), alpha dropped.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <opencv2/core.hpp>

namespace bigtrain::tiler {

// How pixels are stored: in square-ish tiles, in full-width strips, or as one
// compressed stream that must be decoded whole (PNG/JPEG/BMP).
enum class Layout { tiled, striped, whole };

const char* layout_name(Layout layout);

struct LevelInfo {
  int64_t width = 0;
  int64_t height = 0;
  double downsample = 1.0;  // level-0 width / this level's width
  Layout layout = Layout::whole;
  int block_width = 0;   // tile width, or the image width for strips
  int block_height = 0;  // tile height, or rows per strip
  std::string compression;
};

struct ImageInfo {
  std::string path;
  std::string format;  // "tiff", "bigtiff", "png", "jpeg", "bmp"
  int channels = 0;    // 1 or 3
  int bits = 0;        // 8 or 16: the storage
  // The value full brightness is stored as, when the header says it is below the
  // storage's limit: SMaxSampleValue or MaxSampleValue (12- or 14-bit data in 16-bit
  // samples, as microscopes and X-ray detectors write it). 0: not given.
  int max_value = 0;
  std::string max_value_from;  // the tag that gave max_value ("SMaxSampleValue", "MaxSampleValue")
  std::string photometric;  // "min-is-black", "min-is-white", "rgb", "ycbcr"
  bool planar_separate = false;
  std::vector<LevelInfo> levels;  // levels[0] is full resolution, then coarser

  int64_t width() const { return levels.at(0).width; }
  int64_t height() const { return levels.at(0).height; }
  int cv_type() const;  // CV_8UC1 ... CV_16UC3
  // What a pixel is divided by to reach [0, 1]: max_value when given, else 2^bits - 1.
  // The thumbnail (background filter) and the network use this same scale.
  int full_scale() const;
};

// Regions larger than this are refused rather than allocated: callers read tiles,
// never whole gigapixel levels (2 GiB also keeps every cv::Mat index in int range).
inline constexpr int64_t kMaxRegionBytes = int64_t{1} << 31;

class ImageSource {
 public:
  virtual ~ImageSource() = default;
  virtual const ImageInfo& info() const = 0;
  // Exactly the pixels of [x, x+w) x [y, y+h) at `level`; the region must lie inside
  // the level. Safe to call from many threads at once.
  virtual cv::Mat read_region(int level, int64_t x, int64_t y, int64_t w, int64_t h) const = 0;
};

// Opens `path` (TIFF/BigTIFF through libtiff; PNG, JPEG, BMP through OpenCV), chosen
// by the file's magic bytes, not its extension. Reads the header only. Throws
// bigtrain::Error naming the file and the reason for anything it cannot read.
std::unique_ptr<ImageSource> open_image(const std::string& path);

// Shared checks for ImageSource implementations: region inside the level and
// within kMaxRegionBytes. Throws bigtrain::Error naming the file.
void check_region(const ImageInfo& info, int level, int64_t x, int64_t y, int64_t w, int64_t h);

}  // namespace bigtrain::tiler
