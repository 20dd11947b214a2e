#pragma once
// Streaming TIFF writer: pixels come from a callback one tile (or strip) at a time,
// so images far larger than memory can be written. Peak memory is one block.
//
//   TiffWriteOptions options;
//   options.width = 20000; options.height = 20000;     // 3-channel 8-bit, 256² Deflate tiles
//   write_tiff("out.tif", options, [](int level, const cv::Rect& rect, cv::Mat& pixels) {
//     pixels.setTo(cv::Scalar(rect.x % 256, rect.y % 256, level));  // fill rect of `level`
//   });
//
// The file is written under a temporary name next to `path` and renamed into place
// when complete, so readers never see half a file.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <opencv2/core.hpp>

namespace bigtrain::tiler {

enum class TiffCompression { none, lzw, deflate, packbits, jpeg };

std::optional<TiffCompression> parse_tiff_compression(const std::string& name);
const char* tiff_compression_name(TiffCompression compression);

struct TiffWriteOptions {
  int64_t width = 0;
  int64_t height = 0;
  int channels = 3;  // 1 (grey) or 3 (RGB)
  int bits = 8;      // 8 or 16
  bool tiled = true;
  int block_size = 256;      // tiled: square storage blocks (TIFF tiles), a multiple of 16
  int rows_per_strip = 64;   // striped
  TiffCompression compression = TiffCompression::deflate;
  int jpeg_quality = 90;
  int deflate_level = 6;     // 1 (fast) .. 9 (small)
  bool predictor = true;     // horizontal differencing for LZW/Deflate: smaller files
  // RGB JPEG stored as YCbCr with 2x2 chroma subsampling (what scanners write);
  // false stores RGB JPEG, which libtiff compresses without subsampling.
  bool jpeg_ycbcr = true;
  bool bigtiff = false;
  bool separate_planes = false;  // PlanarConfiguration=2: one plane per channel
  // Grey samples are stored as the callback gives them but tagged MinIsWhite, so a
  // reader shows them inverted (readers of this project invert them back).
  bool min_is_white = false;
  // Pyramid: level k is ceil(width / 2^k) x ceil(height / 2^k); the callback
  // supplies each level's pixels (the writer does not resample).
  int levels = 1;
  bool levels_as_subifds = true;  // SubIFDs of the first directory, else further directories
};

// Fills `pixels` (rect.height x rect.width, CV_8U/CV_16U with `channels` channels,
// RGB order) with the pixels of `rect` at pyramid `level`. Called once per tile or
// strip, in file order, from the writing thread.
using TiffPixelCallback = std::function<void(int level, const cv::Rect& rect, cv::Mat& pixels)>;

// Throws bigtrain::Error naming `path` for invalid options or write failures; no
// partial file is left behind.
void write_tiff(const std::string& path, const TiffWriteOptions& options, const TiffPixelCallback& pixels);

}  // namespace bigtrain::tiler
