#pragma once
// ImageSource over a TIFF or BigTIFF file through libtiff.
//
// Concurrency: libtiff handles are not thread-safe, so the source keeps a small pool
// of handles on the same file; each read borrows one (opening another when all are
// busy), so parallel readers never wait on each other's decoding. The pool's lock
// guards only the borrow and the return.
//
// Decoded blocks go through a BlockCache (tiler/block_cache.hpp; the process-wide
// one unless another is given): overlapping reads and repeated passes copy from it
// instead of decoding again, and a read served wholly from it touches no libtiff
// handle. Blocks too large for the cache's budget are decoded into the reader's own
// buffer, as without a cache.
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tiler/block_cache.hpp"
#include "tiler/image_source.hpp"

namespace bigtrain::tiler {

class TiffSource final : public ImageSource {
 public:
  // `cache` may be null (no caching); it must outlive the source.
  explicit TiffSource(const std::string& path, BlockCache* cache = &BlockCache::shared());
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
    // libtiff's block numbering: plane * blocks_per_plane + row * blocks_across + column.
    uint32_t blocks_across = 1;
    uint32_t blocks_per_plane = 1;
    int64_t block_bytes = 0;  // one decoded block as read_blocks stores it
  };

 private:
  struct Reader;
  class Borrowed;

  struct BlockView;
  // Borrows a reader positioned on the level, at the first call only.
  using ReaderOnDemand = std::function<Reader&()>;
  using Decoder = std::function<size_t(Reader&, std::vector<uint8_t>&)>;

  std::unique_ptr<Reader> open_reader() const;
  BlockView fetch_block(const ReaderOnDemand& reader, int level, uint32_t index, const Decoder& decode) const;
  void read_blocks(const ReaderOnDemand& reader, int level, int64_t x, int64_t y, cv::Mat& out) const;
  void read_blocks_rgba(const ReaderOnDemand& reader, int level, int64_t x, int64_t y, cv::Mat& out) const;

  ImageInfo info_;
  BlockCache* cache_ = nullptr;
  uint64_t cache_id_ = 0;
  uint64_t file_size_ = 0;
  std::vector<LevelStorage> storage_;
  mutable std::mutex pool_mutex_;
  mutable std::vector<std::unique_ptr<Reader>> idle_readers_;
};

}  // namespace bigtrain::tiler
