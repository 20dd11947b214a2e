#pragma once
// ImageSource over a TIFF or BigTIFF file through libtiff.
//
// Concurrency: libtiff handles are not thread-safe, so the source keeps a small pool
// of handles on the same file; each read borrows one (opening another when all are
// busy), so parallel readers never wait on each other's decoding. The pool's lock
// guards only the borrow and the return.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tiler/image_source.hpp"

namespace bigtrain::tiler {

class TiffSource final : public ImageSource {
 public:
  explicit TiffSource(const std::string& path);
  ~TiffSource() override;

  const ImageInfo& info() const override { return info_; }
  cv::Mat read_region(int level, int64_t x, int64_t y, int64_t w, int64_t h) const override;

  // How one level's samples are laid out and decoded.
  struct LevelStorage {
    uint64_t directory_offset = 0;  // for TIFFSetSubDirectory: main IFD or SubIFD alike
    int samples_per_pixel = 1;     // stored samples, >= channels (extra ones are alpha)
    bool separate_planes = false;
    bool min_is_white = false;
    bool jpeg_to_rgb = false;  // YCbCr JPEG, converted by libjpeg (JPEGCOLORMODE_RGB)
    bool via_rgba = false;     // other YCbCr: libtiff's RGBA reader (exact for 8-bit)
  };

 private:
  struct Reader;
  class Borrowed;

  std::unique_ptr<Reader> open_reader() const;
  void read_blocks(Reader& reader, int level, int64_t x, int64_t y, cv::Mat& out) const;
  void read_blocks_rgba(Reader& reader, int level, int64_t x, int64_t y, cv::Mat& out) const;

  ImageInfo info_;
  uint64_t file_size_ = 0;
  std::vector<LevelStorage> storage_;
  mutable std::mutex pool_mutex_;
  mutable std::vector<std::unique_ptr<Reader>> idle_readers_;
};

}  // namespace bigtrain::tiler
