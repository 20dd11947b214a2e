#include "tiler/tiff_writer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>
#include <zlib.h>

#include "kernels/core/error.hpp"
#include "tiler/tiff_handle.hpp"

namespace bigtrain::tiler {
namespace {

void validate(const std::string& path, const TiffWriteOptions& o) {
  auto fail = [&](const std::string& why) { throw Error(fmt::format("{}: cannot write TIFF: {}", path, why)); };
  if (o.width <= 0 || o.height <= 0 || o.width > (int64_t{1} << 20) || o.height > (int64_t{1} << 20))
    fail(fmt::format("invalid size {}x{}", o.width, o.height));
  if (o.channels != 1 && o.channels != 3) fail(fmt::format("{} channels (1 or 3 supported)", o.channels));
  if (o.bits != 8 && o.bits != 16) fail(fmt::format("{} bits (8 or 16 supported)", o.bits));
  if (o.tiled && (o.block_size < 16 || o.block_size % 16 != 0 || o.block_size > 8192))
    fail(fmt::format("block size {} is not a multiple of 16 in [16, 8192]", o.block_size));
  if (!o.tiled && o.rows_per_strip < 1) fail("rows per strip must be positive");
  if (o.compression == TiffCompression::jpeg) {
    if (o.bits != 8) fail("JPEG needs 8-bit samples");
    const int mcu = (o.channels == 3 && o.jpeg_ycbcr) ? 16 : 8;
    if (!o.tiled && o.rows_per_strip % mcu != 0 && o.rows_per_strip < o.height)
      fail(fmt::format("JPEG strips need a multiple of {} rows", mcu));
    if (o.separate_planes && o.jpeg_ycbcr && o.channels == 3) fail("YCbCr JPEG cannot use separate planes");
  }
  if (o.min_is_white && o.channels != 1) fail("MinIsWhite applies to grey images only");
  if (o.levels < 1 || o.levels > 16) fail(fmt::format("{} pyramid levels (1..16 supported)", o.levels));
}

uint16_t libtiff_compression(TiffCompression c) {
  switch (c) {
    case TiffCompression::none: return COMPRESSION_NONE;
    case TiffCompression::lzw: return COMPRESSION_LZW;
    case TiffCompression::deflate: return COMPRESSION_ADOBE_DEFLATE;
    case TiffCompression::packbits: return COMPRESSION_PACKBITS;
    case TiffCompression::jpeg: return COMPRESSION_JPEG;
  }
  return COMPRESSION_NONE;
}

class LevelWriter {
 public:
  LevelWriter(TiffHandle& handle, const TiffWriteOptions& o, int level, const TiffPixelCallback& pixels)
      : h_(handle), o_(o), level_(level), pixels_(pixels) {
    width_ = (o.width + (int64_t{1} << level) - 1) >> level;
    height_ = (o.height + (int64_t{1} << level) - 1) >> level;
  }

  void write() {
    set_tags();
    const int64_t bw = o_.tiled ? o_.block_size : width_;
    const int64_t bh = o_.tiled ? o_.block_size : std::min<int64_t>(o_.rows_per_strip, height_);
    const int planes = o_.separate_planes ? o_.channels : 1;
    const int samples = o_.separate_planes ? 1 : o_.channels;
    const size_t sample_bytes = o_.bits / 8;
    std::vector<uint8_t> block(static_cast<size_t>(bw * bh) * samples * sample_bytes);
    cv::Mat pixels;
    if (encodes_itself()) pending_.reserve(batch_blocks(block.size()));
    for (int64_t by = 0; by < height_; by += bh) {
      for (int64_t bx = 0; bx < width_; bx += bw) {
        const cv::Rect rect(static_cast<int>(bx), static_cast<int>(by), static_cast<int>(std::min(bw, width_ - bx)),
                            static_cast<int>(std::min(bh, height_ - by)));
        pixels.create(rect.height, rect.width, CV_MAKETYPE(o_.bits == 16 ? CV_16U : CV_8U, o_.channels));
        pixels_(level_, rect, pixels);
        if (pixels.rows != rect.height || pixels.cols != rect.width ||
            pixels.type() != CV_MAKETYPE(o_.bits == 16 ? CV_16U : CV_8U, o_.channels))
          throw Error(fmt::format("{}: the pixel callback changed the block's size or type", h_.path()));
        for (int plane = 0; plane < planes; ++plane) {
          const size_t row_bytes = static_cast<size_t>(rect.width) * samples * sample_bytes;
          for (int row = 0; row < rect.height; ++row) {
            uint8_t* dst = block.data() + static_cast<size_t>(row) * bw * samples * sample_bytes;
            const uint8_t* src = pixels.ptr<uint8_t>(row);
            if (!o_.separate_planes) {
              std::memcpy(dst, src, row_bytes);
            } else {
              for (int col = 0; col < rect.width; ++col)
                std::memcpy(dst + col * sample_bytes, src + (static_cast<size_t>(col) * o_.channels + plane) * sample_bytes,
                            sample_bytes);
            }
          }
          if (o_.tiled) pad_by_replication(block, rect, bw, bh, samples * sample_bytes);
          if (encodes_itself()) {
            queue_block(bx, by, plane, block, bw, samples, sample_bytes);
          } else {
            write_block(bx, by, rect.height, plane, block, row_bytes);
          }
        }
      }
    }
    flush_pending(samples, sample_bytes, bw);
    if (!TIFFWriteDirectory(h_.get())) h_.fail(fmt::format("cannot write the directory of level {}", level_));
  }

 private:
  void set_tags() {
    TIFF* tif = h_.get();
    const bool ycbcr = o_.compression == TiffCompression::jpeg && o_.channels == 3 && o_.jpeg_ycbcr;
    const uint16_t photometric = o_.channels == 3 ? (ycbcr ? PHOTOMETRIC_YCBCR : PHOTOMETRIC_RGB)
                                 : o_.min_is_white ? PHOTOMETRIC_MINISWHITE
                                                   : PHOTOMETRIC_MINISBLACK;
    bool ok = TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, static_cast<uint32_t>(width_)) &&
              TIFFSetField(tif, TIFFTAG_IMAGELENGTH, static_cast<uint32_t>(height_)) &&
              TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, static_cast<uint16_t>(o_.channels)) &&
              TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, static_cast<uint16_t>(o_.bits)) &&
              TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_UINT) &&
              TIFFSetField(tif, TIFFTAG_PLANARCONFIG, o_.separate_planes ? PLANARCONFIG_SEPARATE : PLANARCONFIG_CONTIG) &&
              TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, photometric) &&
              TIFFSetField(tif, TIFFTAG_COMPRESSION, libtiff_compression(o_.compression));
    if (ok && level_ > 0) ok = TIFFSetField(tif, TIFFTAG_SUBFILETYPE, FILETYPE_REDUCEDIMAGE);
    if (ok && level_ == 0 && o_.levels > 1 && o_.levels_as_subifds) {
      // Placeholders; libtiff fills in the offsets as the next directories are written.
      std::vector<toff_t> offsets(o_.levels - 1, 0);
      ok = TIFFSetField(tif, TIFFTAG_SUBIFD, static_cast<uint16_t>(offsets.size()), offsets.data());
    }
    if (ok && o_.tiled)
      ok = TIFFSetField(tif, TIFFTAG_TILEWIDTH, static_cast<uint32_t>(o_.block_size)) &&
           TIFFSetField(tif, TIFFTAG_TILELENGTH, static_cast<uint32_t>(o_.block_size));
    if (ok && !o_.tiled) ok = TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, static_cast<uint32_t>(o_.rows_per_strip));
    if (ok && o_.compression == TiffCompression::jpeg) {
      ok = TIFFSetField(tif, TIFFTAG_JPEGQUALITY, o_.jpeg_quality);
      // The callback gives RGB; libjpeg converts to YCbCr and subsamples.
      if (ok && ycbcr) ok = TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
    }
    if (ok && o_.compression == TiffCompression::deflate) ok = TIFFSetField(tif, TIFFTAG_ZIPQUALITY, o_.deflate_level);
    if (ok && o_.predictor && (o_.compression == TiffCompression::deflate || o_.compression == TiffCompression::lzw))
      ok = TIFFSetField(tif, TIFFTAG_PREDICTOR, PREDICTOR_HORIZONTAL);
    if (!ok) h_.fail(fmt::format("cannot set the tags of level {}", level_));
  }

  // Edge blocks are stored full size. Repeating the edge pixels into the padding
  // (rather than zeros) keeps JPEG's blocks smooth, so edge pixels stay accurate.
  static void pad_by_replication(std::vector<uint8_t>& block, const cv::Rect& rect, int64_t bw, int64_t bh, size_t pixel_bytes) {
    const size_t stride = static_cast<size_t>(bw) * pixel_bytes;
    for (int row = 0; row < rect.height; ++row) {
      uint8_t* line = block.data() + row * stride;
      for (int64_t col = rect.width; col < bw; ++col)
        std::memcpy(line + col * pixel_bytes, line + (rect.width - 1) * pixel_bytes, pixel_bytes);
    }
    for (int64_t row = rect.height; row < bh; ++row)
      std::memcpy(block.data() + row * stride, block.data() + (rect.height - 1) * stride, stride);
  }

  void write_block(int64_t bx, int64_t by, int rows, int plane, std::vector<uint8_t>& block, size_t row_bytes) {
    TIFF* tif = h_.get();
    tmsize_t written;
    if (o_.tiled) {
      const uint32_t index = TIFFComputeTile(tif, static_cast<uint32_t>(bx), static_cast<uint32_t>(by), 0, static_cast<uint16_t>(plane));
      written = TIFFWriteEncodedTile(tif, index, block.data(), static_cast<tmsize_t>(block.size()));
    } else {
      const uint32_t index = TIFFComputeStrip(tif, static_cast<uint32_t>(by), static_cast<uint16_t>(plane));
      written = TIFFWriteEncodedStrip(tif, index, block.data(), static_cast<tmsize_t>(row_bytes * rows));
    }
    if (written < 0) h_.fail(fmt::format("cannot write the block at ({}, {}) of level {}", bx, by, level_));
  }

  // Blocks without compression or with Deflate are encoded here, with zlib, rather
  // than by libtiff, for two reasons: several blocks are compressed at once (libtiff
  // encodes on the writing thread only; the pixel callback still runs there, in file
  // order), and a block of one value throughout (blank slide background, a flat
  // padding area) is compressed once per value and its bytes reused, which makes
  // writing a mostly-blank 50000x50000 test slide a matter of I/O. The streams are
  // what libtiff's own codec writes: zlib format, after horizontal differencing.
  bool encodes_itself() const {
    return o_.tiled && (o_.compression == TiffCompression::none || o_.compression == TiffCompression::deflate);
  }

  // Blocks compressed in one parallel batch: enough for every core twice, at most
  // ~64 MB of raw blocks.
  static size_t batch_blocks(size_t block_bytes) {
    const size_t cores = static_cast<size_t>(std::max(1, tbb::this_task_arena::max_concurrency()));
    return std::clamp<size_t>((size_t{64} << 20) / std::max<size_t>(block_bytes, 1), 1, 2 * cores);
  }

  struct PendingBlock {
    uint32_t index = 0;
    std::vector<uint8_t> raw;
    std::string uniform_value;  // the one pixel value of a uniform block, else empty
    std::vector<uint8_t> encoded;
    const std::vector<uint8_t>* reused = nullptr;  // encoded bytes of an earlier uniform block
  };

  void queue_block(int64_t bx, int64_t by, int plane, const std::vector<uint8_t>& block, int64_t bw, int samples,
                   size_t sample_bytes) {
    PendingBlock p;
    p.index = TIFFComputeTile(h_.get(), static_cast<uint32_t>(bx), static_cast<uint32_t>(by), 0, static_cast<uint16_t>(plane));
    p.raw = block;
    // Uniform iff every pixel equals the next one: one comparison of the block with
    // itself shifted by a pixel.
    const size_t pixel = static_cast<size_t>(samples) * sample_bytes;
    if (std::memcmp(block.data(), block.data() + pixel, block.size() - pixel) == 0) {
      p.uniform_value.assign(reinterpret_cast<const char*>(block.data()), pixel);
      if (auto found = uniform_encoded_.find(p.uniform_value); found != uniform_encoded_.end()) p.reused = &found->second;
    }
    pending_.push_back(std::move(p));
    if (pending_.size() >= batch_blocks(block.size())) flush_pending(samples, sample_bytes, bw);
  }

  void flush_pending(int samples, size_t sample_bytes, int64_t bw) {
    if (pending_.empty()) return;
    tbb::parallel_for(size_t{0}, pending_.size(), [&](size_t i) {
      PendingBlock& p = pending_[i];
      if (p.reused == nullptr) p.encoded = encode(p.raw, samples, sample_bytes, bw);
    });
    for (PendingBlock& p : pending_) {
      if (!p.uniform_value.empty() && p.reused == nullptr) {
        auto [where, inserted] = uniform_encoded_.emplace(p.uniform_value, std::move(p.encoded));
        p.reused = &where->second;
      }
      const std::vector<uint8_t>& bytes = p.reused != nullptr ? *p.reused : p.encoded;
      if (TIFFWriteRawTile(h_.get(), p.index, const_cast<uint8_t*>(bytes.data()), static_cast<tmsize_t>(bytes.size())) < 0)
        h_.fail(fmt::format("cannot write block {} of level {}", p.index, level_));
    }
    pending_.clear();
  }

  std::vector<uint8_t> encode(std::vector<uint8_t>& raw, int samples, size_t sample_bytes, int64_t bw) const {
    if (o_.compression == TiffCompression::none) return std::move(raw);
    if (o_.predictor) {
      // TIFF Predictor 2, as libtiff applies it: per row, each sample minus the same
      // sample of the previous pixel (modulo 2^bits), in the file's byte order (the
      // host's: the writer never swaps).
      const size_t row_samples = static_cast<size_t>(bw) * samples;
      const size_t rows = raw.size() / (row_samples * sample_bytes);
      for (size_t r = 0; r < rows; ++r) {
        if (sample_bytes == 1) {
          uint8_t* row = raw.data() + r * row_samples;
          for (size_t i = row_samples - 1; i >= static_cast<size_t>(samples); --i) row[i] = static_cast<uint8_t>(row[i] - row[i - samples]);
        } else {
          auto* row = reinterpret_cast<uint16_t*>(raw.data()) + r * row_samples;
          for (size_t i = row_samples - 1; i >= static_cast<size_t>(samples); --i) row[i] = static_cast<uint16_t>(row[i] - row[i - samples]);
        }
      }
    }
    uLongf size = compressBound(static_cast<uLong>(raw.size()));
    std::vector<uint8_t> out(size);
    if (compress2(out.data(), &size, raw.data(), static_cast<uLong>(raw.size()), o_.deflate_level) != Z_OK)
      throw Error(fmt::format("{}: zlib failed to compress a block of level {}", h_.path(), level_));
    out.resize(size);
    return out;
  }

  std::vector<PendingBlock> pending_;
  std::map<std::string, std::vector<uint8_t>> uniform_encoded_;  // pixel value -> its uniform block, encoded
  TiffHandle& h_;
  const TiffWriteOptions& o_;
  int level_;
  const TiffPixelCallback& pixels_;
  int64_t width_ = 0, height_ = 0;
};

}  // namespace

std::optional<TiffCompression> parse_tiff_compression(const std::string& name) {
  for (TiffCompression c : {TiffCompression::none, TiffCompression::lzw, TiffCompression::deflate,
                            TiffCompression::packbits, TiffCompression::jpeg})
    if (name == tiff_compression_name(c)) return c;
  return std::nullopt;
}

const char* tiff_compression_name(TiffCompression compression) {
  switch (compression) {
    case TiffCompression::none: return "none";
    case TiffCompression::lzw: return "lzw";
    case TiffCompression::deflate: return "deflate";
    case TiffCompression::packbits: return "packbits";
    case TiffCompression::jpeg: return "jpeg";
  }
  return "?";
}

void write_tiff(const std::string& path, const TiffWriteOptions& options, const TiffPixelCallback& pixels) {
  validate(path, options);
  const std::string temporary = fmt::format("{}.tmp-{}", path, ::getpid());
  try {
    TiffHandle handle(temporary, options.bigtiff ? "w8" : "w");
    for (int level = 0; level < options.levels; ++level) LevelWriter(handle, options, level, pixels).write();
    handle.close();
    std::error_code ec;
    std::filesystem::rename(temporary, path, ec);
    if (ec) throw Error(fmt::format("{}: cannot move the written TIFF into place: {}", path, ec.message()));
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw;
  }
}

}  // namespace bigtrain::tiler
