#include "tiler/tiff_source.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "tiler/tiff_handle.hpp"

namespace bigtrain::tiler {
namespace {

// No real slide is a million pixels on a side at full resolution; a header that
// says so is corrupt or hostile, and refusing it early keeps every later size
// computation far from overflow.
constexpr int64_t kMaxSide = int64_t{1} << 20;
// One decoded block (TIFF tile or strip) must fit comfortably in memory next to its siblings
// being decoded on other threads.
constexpr int64_t kMaxBlockBytes = int64_t{256} << 20;
// Bounds the walk over a (possibly looping or absurdly long) directory chain.
constexpr int kMaxDirectories = 4096;

std::string compression_name(uint16_t compression) {
  switch (compression) {
    case COMPRESSION_NONE: return "none";
    case COMPRESSION_LZW: return "lzw";
    case COMPRESSION_ADOBE_DEFLATE:
    case COMPRESSION_DEFLATE: return "deflate";
    case COMPRESSION_PACKBITS: return "packbits";
    case COMPRESSION_JPEG: return "jpeg";
    case COMPRESSION_OJPEG: return "old-jpeg";
    case COMPRESSION_LZMA: return "lzma";
    case COMPRESSION_ZSTD: return "zstd";
    case COMPRESSION_WEBP: return "webp";
    case 33003:
    case 33005:
    case 34712: return "jpeg2000";
    default: {
      const TIFFCodec* codec = TIFFFindCODEC(compression);
      return codec ? std::string(codec->name) : fmt::format("compression-{}", compression);
    }
  }
}

// What one directory holds, checked against everything read_region supports.
struct Directory {
  int64_t width = 0, height = 0;
  LevelInfo level;
  TiffSource::LevelStorage storage;
  int channels = 0, bits = 0;
  int max_value = 0;
  std::string max_value_from;
  std::string photometric;
  bool reduced = false;  // NewSubfileType says "reduced-resolution version"
};

template <typename T>
T field_or(TIFF* tif, ttag_t tag, T fallback) {
  T value{};
  return TIFFGetField(tif, tag, &value) ? value : fallback;
}

// Describes the current directory of `tif`, or returns why it cannot be read.
std::optional<Directory> describe(TIFF* tif, uint64_t file_size, std::string& why) {
  Directory d;
  uint32_t width = 0, height = 0;
  if (!TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &width) || !TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &height) || width == 0 ||
      height == 0) {
    why = "the header has no valid image width and height";
    return std::nullopt;
  }
  d.width = width;
  d.height = height;
  if (d.width > kMaxSide || d.height > kMaxSide) {
    why = fmt::format("the header declares an absurd size {}x{} (at most {} pixels a side are supported)", d.width,
                      d.height, kMaxSide);
    return std::nullopt;
  }
  const uint16_t bits = field_or<uint16_t>(tif, TIFFTAG_BITSPERSAMPLE, 1);
  const uint16_t spp = field_or<uint16_t>(tif, TIFFTAG_SAMPLESPERPIXEL, 1);
  const uint16_t sample_format = field_or<uint16_t>(tif, TIFFTAG_SAMPLEFORMAT, SAMPLEFORMAT_UINT);
  const uint16_t planar = field_or<uint16_t>(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  const uint16_t compression = field_or<uint16_t>(tif, TIFFTAG_COMPRESSION, COMPRESSION_NONE);
  uint16_t photometric = 0;
  if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &photometric)) {
    why = "the header has no photometric interpretation";
    return std::nullopt;
  }
  const uint32_t subfile_type = field_or<uint32_t>(tif, TIFFTAG_SUBFILETYPE, 0);
  d.reduced = (subfile_type & FILETYPE_REDUCEDIMAGE) != 0;

  if (sample_format == SAMPLEFORMAT_IEEEFP) {
    why = "floating-point samples are not supported (8- or 16-bit unsigned integers only)";
    return std::nullopt;
  }
  if (sample_format != SAMPLEFORMAT_UINT && sample_format != SAMPLEFORMAT_VOID) {
    why = fmt::format("sample format {} is not supported (8- or 16-bit unsigned integers only)", sample_format);
    return std::nullopt;
  }
  if (bits == 1) {
    why = "1-bit (bilevel) images are not supported (8- or 16-bit only)";
    return std::nullopt;
  }
  if (bits != 8 && bits != 16) {
    why = fmt::format("{} bits per sample is not supported (8 or 16 only{})", bits,
                      bits == 10 || bits == 12 || bits == 14
                          ? "; store the samples in 16 bits with MaxSampleValue or SMaxSampleValue giving their range"
                          : "");
    return std::nullopt;
  }
  if (planar != PLANARCONFIG_CONTIG && planar != PLANARCONFIG_SEPARATE) {
    why = fmt::format("invalid planar configuration {}", planar);
    return std::nullopt;
  }
  d.bits = bits;
  // Data of fewer bits in 16-bit samples: the header's declared maximum, when it is
  // a real one (below the storage's limit, above 0), is full brightness.
  const int storage_max = (1 << bits) - 1;
  double smax = 0;
  uint16_t max_sample = 0;
  if (TIFFGetField(tif, TIFFTAG_SMAXSAMPLEVALUE, &smax) && smax >= 1 && smax < storage_max) {
    d.max_value = static_cast<int>(std::lround(smax));
    d.max_value_from = "SMaxSampleValue";
  } else if (TIFFGetField(tif, TIFFTAG_MAXSAMPLEVALUE, &max_sample) && max_sample >= 1 && max_sample < storage_max) {
    d.max_value = max_sample;
    d.max_value_from = "MaxSampleValue";
  }
  d.storage.samples_per_pixel = spp;
  d.storage.separate_planes = planar == PLANARCONFIG_SEPARATE && spp > 1;
  switch (photometric) {
    case PHOTOMETRIC_MINISBLACK:
    case PHOTOMETRIC_MINISWHITE:
      d.channels = 1;
      d.storage.min_is_white = photometric == PHOTOMETRIC_MINISWHITE;
      d.photometric = d.storage.min_is_white ? "min-is-white" : "min-is-black";
      break;
    case PHOTOMETRIC_RGB:
      d.channels = 3;
      d.photometric = "rgb";
      break;
    case PHOTOMETRIC_YCBCR:
      d.channels = 3;
      d.photometric = "ycbcr";
      if (compression == COMPRESSION_JPEG && bits == 8 && !d.storage.separate_planes) {
        d.storage.jpeg_to_rgb = true;
      } else if (bits == 8 && !d.storage.separate_planes) {
        d.storage.via_rgba = true;
      } else {
        why = "YCbCr is supported only as 8-bit interleaved samples";
        return std::nullopt;
      }
      break;
    case PHOTOMETRIC_PALETTE:
      why = "palette (colour-mapped) images are not supported; convert to RGB first";
      return std::nullopt;
    case PHOTOMETRIC_SEPARATED:
      why = "CMYK (separated) images are not supported; convert to RGB first";
      return std::nullopt;
    default:
      why = fmt::format("photometric interpretation {} is not supported (grey, RGB or YCbCr only)", photometric);
      return std::nullopt;
  }
  if (spp < d.channels) {
    why = fmt::format("{} samples per pixel is too few for {} photometric", spp, d.photometric);
    return std::nullopt;
  }
  if (!TIFFIsCODECConfigured(compression)) {
    why = fmt::format("compression {} is not supported by this libtiff", compression_name(compression));
    return std::nullopt;
  }
  d.level.width = d.width;
  d.level.height = d.height;
  d.level.compression = compression_name(compression);
  const int64_t bytes_per_sample = bits / 8;
  const int64_t block_samples = d.storage.separate_planes ? 1 : spp;
  int64_t blocks = 0;
  if (TIFFIsTiled(tif)) {
    uint32_t block_w = 0, block_h = 0;
    TIFFGetField(tif, TIFFTAG_TILEWIDTH, &block_w);
    TIFFGetField(tif, TIFFTAG_TILELENGTH, &block_h);
    if (block_w == 0 || block_h == 0 || block_w > kMaxSide || block_h > kMaxSide ||
        int64_t{block_w} * block_h * block_samples * bytes_per_sample > kMaxBlockBytes) {
      why = fmt::format("invalid TIFF tile (block) size {}x{}", block_w, block_h);
      return std::nullopt;
    }
    d.level.layout = Layout::tiled;
    d.level.block_width = static_cast<int>(block_w);
    d.level.block_height = static_cast<int>(block_h);
    blocks = int64_t{TIFFNumberOfTiles(tif)};
    d.storage.blocks_across = static_cast<uint32_t>((d.width + block_w - 1) / block_w);
    d.storage.blocks_per_plane = d.storage.blocks_across * static_cast<uint32_t>((d.height + block_h - 1) / block_h);
  } else {
    uint32_t rows = field_or<uint32_t>(tif, TIFFTAG_ROWSPERSTRIP, height);
    rows = std::min<uint32_t>(std::max<uint32_t>(rows, 1), height);
    if (d.width * rows * block_samples * bytes_per_sample > kMaxBlockBytes) {
      why = fmt::format("its strips of {} rows of {} pixels are too large to read lazily (rewrite it tiled)", rows,
                        d.width);
      return std::nullopt;
    }
    d.level.layout = Layout::striped;
    d.level.block_width = static_cast<int>(d.width);
    d.level.block_height = static_cast<int>(rows);
    blocks = int64_t{TIFFNumberOfStrips(tif)};
    d.storage.blocks_across = 1;
    d.storage.blocks_per_plane = static_cast<uint32_t>((d.height + rows - 1) / rows);
  }
  // What read_blocks keeps of one block: the samples libtiff decodes (RGB for
  // YCbCr JPEG, once JPEGCOLORMODE_RGB is set), or 4 bytes a pixel through RGBA.
  const int64_t block_pixels = int64_t{d.level.block_width} * d.level.block_height;
  if (d.storage.via_rgba) d.storage.block_bytes = block_pixels * 4;
  else if (d.storage.jpeg_to_rgb) d.storage.block_bytes = block_pixels * 3;
  else d.storage.block_bytes = block_pixels * block_samples * bytes_per_sample;
  // Every block needs an entry in the offsets table stored in the file, so a
  // header declaring more blocks than the file has bytes is corrupt.
  if (blocks <= 0 || (blocks > 1 && static_cast<uint64_t>(blocks) * 4 > file_size)) {
    why = fmt::format("the header declares {} {} but the file has only {} bytes", blocks,
                      d.level.layout == Layout::tiled ? "tiles" : "strips", file_size);
    return std::nullopt;
  }
  return d;
}

bool same_pixel_format(const Directory& a, const Directory& b) {
  return a.channels == b.channels && a.bits == b.bits && a.storage.min_is_white == b.storage.min_is_white;
}

}  // namespace

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::tiled: return "tiled";
    case Layout::striped: return "striped";
    case Layout::whole: return "whole";
  }
  return "?";
}

struct TiffSource::Reader {
  // "m": no memory mapping. Mapped pages of a multi-gigabyte file would count in
  // the process RSS as tiles are read; plain reads keep memory flat.
  explicit Reader(const std::string& path) : handle(path, "rm") {}
  TiffHandle handle;
  int level = -1;  // directory the handle is positioned on
  std::vector<uint8_t> block;  // blocks decoded without the cache
};

// A decoded block: in the cache (held alive by `hold` while it is copied out) or in
// the reader's own buffer.
struct TiffSource::BlockView {
  const uint8_t* data = nullptr;
  size_t valid = 0;
  BlockCache::Block hold;
};

// Returns the borrowed reader to the pool when the read ends, even by exception; a
// reader whose read failed is closed instead (its libtiff state is suspect).
class TiffSource::Borrowed {
 public:
  explicit Borrowed(const TiffSource& source) : source_(source) {
    {
      std::lock_guard lock(source_.pool_mutex_);
      if (!source_.idle_readers_.empty()) {
        reader_ = std::move(source_.idle_readers_.back());
        source_.idle_readers_.pop_back();
      }
    }
    if (!reader_) reader_ = source_.open_reader();
  }
  ~Borrowed() {
    if (!ok_) return;
    static const size_t keep = std::max(4u, 2 * std::thread::hardware_concurrency());
    std::lock_guard lock(source_.pool_mutex_);
    if (source_.idle_readers_.size() < keep) source_.idle_readers_.push_back(std::move(reader_));
  }
  Reader& operator*() { return *reader_; }
  void succeeded() { ok_ = true; }

 private:
  const TiffSource& source_;
  std::unique_ptr<Reader> reader_;
  bool ok_ = false;
};

TiffSource::TiffSource(const std::string& path, BlockCache* cache)
    : cache_(cache), cache_id_(BlockCache::new_source_id()) {
  std::error_code ec;
  file_size_ = std::filesystem::file_size(path, ec);
  if (ec) throw Error(fmt::format("{}: cannot open: {}", path, ec.message()));
  TiffHandle handle(path, "rm");
  TIFF* tif = handle.get();
  std::string why;
  std::optional<Directory> full = describe(tif, file_size_, why);
  if (!full) throw Error(fmt::format("{}: {}", path, why));
  std::string errors = handle.take_errors();
  if (!errors.empty()) throw Error(fmt::format("{}: corrupt TIFF header: {}", path, errors));
  full->storage.directory_offset = TIFFCurrentDirOffset(tif);

  info_.path = path;
  info_.format = TIFFIsBigTIFF(tif) ? "bigtiff" : "tiff";
  info_.channels = full->channels;
  info_.bits = full->bits;
  info_.max_value = full->max_value;
  info_.max_value_from = full->max_value_from;
  info_.photometric = full->photometric;
  info_.planar_separate = full->storage.separate_planes;

  std::vector<Directory> levels{*full};
  auto consider = [&](const char* where) {
    std::string reason;
    std::optional<Directory> d = describe(tif, file_size_, reason);
    handle.take_errors();
    if (!d) {
      spdlog::debug("{}: ignoring {} directory: {}", path, where, reason);
      return;
    }
    if (!same_pixel_format(*d, *full) || d->width >= full->width || d->height >= full->height) {
      spdlog::debug("{}: ignoring {} directory {}x{}: not a reduced version of the image", path, where, d->width,
                    d->height);
      return;
    }
    d->storage.directory_offset = TIFFCurrentDirOffset(tif);
    levels.push_back(*d);
  };

  // Pyramid levels as SubIFDs of the first directory (the OME/modern convention).
  uint16_t subifd_count = 0;
  uint64_t* subifd_offsets_raw = nullptr;
  std::vector<uint64_t> subifd_offsets;
  if (TIFFGetField(tif, TIFFTAG_SUBIFD, &subifd_count, &subifd_offsets_raw) && subifd_offsets_raw)
    subifd_offsets.assign(subifd_offsets_raw, subifd_offsets_raw + std::min<int>(subifd_count, kMaxDirectories));
  for (uint64_t offset : subifd_offsets) {
    if (offset == 0 || offset >= file_size_ || !TIFFSetSubDirectory(tif, offset)) {
      spdlog::debug("{}: ignoring unreadable SubIFD at offset {}: {}", path, offset, handle.take_errors());
      continue;
    }
    consider("SubIFD");
  }
  // Pyramid levels as further top-level directories marked reduced-resolution
  // (the classic convention; also SVS-like files, whose label/macro pages are not).
  if (!TIFFSetSubDirectory(tif, full->storage.directory_offset)) handle.fail("cannot re-read the first directory");
  for (int index = 1; index < kMaxDirectories && TIFFReadDirectory(tif); ++index) {
    if (field_or<uint32_t>(tif, TIFFTAG_SUBFILETYPE, 0) & FILETYPE_REDUCEDIMAGE) consider("reduced-resolution");
  }
  handle.take_errors();  // a damaged later directory leaves the levels found so far usable

  std::stable_sort(levels.begin() + 1, levels.end(), [](const Directory& a, const Directory& b) { return a.width > b.width; });
  for (Directory& d : levels) {
    d.level.downsample = static_cast<double>(full->width) / static_cast<double>(d.width);
    info_.levels.push_back(d.level);
    storage_.push_back(d.storage);
  }
}

TiffSource::~TiffSource() {
  if (cache_) cache_->erase_source(cache_id_);
}

std::unique_ptr<TiffSource::Reader> TiffSource::open_reader() const { return std::make_unique<Reader>(info_.path); }

cv::Mat TiffSource::read_region(int level, int64_t x, int64_t y, int64_t w, int64_t h) const {
  check_region(info_, level, x, y, w, h);
  cv::Mat out(static_cast<int>(h), static_cast<int>(w), info_.cv_type());
  // A reader is borrowed only when a block must be decoded: a read served wholly
  // from the cache needs no libtiff handle (and opens no file).
  std::optional<Borrowed> borrowed;
  const ReaderOnDemand reader = [&]() -> Reader& {
    if (borrowed) return **borrowed;
    borrowed.emplace(*this);
    Reader& r = **borrowed;
    TIFF* tif = r.handle.get();
    if (r.level != level) {
      r.level = -1;
      if (!TIFFSetSubDirectory(tif, storage_[level].directory_offset))
        r.handle.fail(fmt::format("cannot read the directory of level {}", level));
      if (storage_[level].jpeg_to_rgb && !TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB))
        r.handle.fail("cannot enable JPEG YCbCr to RGB conversion");
      r.level = level;
    }
    return r;
  };
  if (storage_[level].via_rgba)
    read_blocks_rgba(reader, level, x, y, out);
  else
    read_blocks(reader, level, x, y, out);
  // MinIsWhite stores ink as high values; every source reports brighter = higher.
  if (storage_[level].min_is_white) cv::bitwise_not(out, out);
  if (borrowed) borrowed->succeeded();
  return out;
}

TiffSource::BlockView TiffSource::fetch_block(const ReaderOnDemand& reader, int level, uint32_t index,
                                              const Decoder& decode) const {
  if (cache_ && cache_->would_keep(static_cast<size_t>(storage_[level].block_bytes))) {
    BlockCache::Block block = cache_->get({cache_id_, level, index}, [&] {
      DecodedBlock decoded;
      decoded.valid = decode(reader(), decoded.bytes);
      return decoded;
    });
    return {block->bytes.data(), block->valid, block};
  }
  Reader& r = reader();
  const size_t valid = decode(r, r.block);
  return {r.block.data(), valid, nullptr};
}

namespace {

// Copies the part of one decoded block that overlaps the output. `block` holds
// block_w-wide rows of `stride_samples` samples per pixel; samples [0, copy) of
// each pixel go to output channels [first_channel, first_channel + copy).
template <typename T>
void copy_block(const uint8_t* block, int64_t block_w, int stride_samples, int copy, int first_channel,
                int64_t src_x, int64_t src_y, cv::Mat& out, int64_t dst_x, int64_t dst_y, int64_t w, int64_t h) {
  const int out_channels = out.channels();
  const T* src_base = reinterpret_cast<const T*>(block);
  for (int64_t row = 0; row < h; ++row) {
    const T* src = src_base + ((src_y + row) * block_w + src_x) * stride_samples;
    T* dst = out.ptr<T>(static_cast<int>(dst_y + row)) + dst_x * out_channels + first_channel;
    if (stride_samples == out_channels && copy == out_channels) {
      std::memcpy(dst, src, static_cast<size_t>(w * out_channels) * sizeof(T));
      continue;
    }
    for (int64_t col = 0; col < w; ++col)
      for (int s = 0; s < copy; ++s) dst[col * out_channels + s] = src[col * stride_samples + s];
  }
}

}  // namespace

void TiffSource::read_blocks(const ReaderOnDemand& reader, int level, int64_t x, int64_t y, cv::Mat& out) const {
  const LevelInfo& L = info_.levels[level];
  const LevelStorage& S = storage_[level];
  const bool tiled = L.layout == Layout::tiled;
  const char* kind = tiled ? "tile" : "strip";
  const int64_t bw = L.block_width, bh = L.block_height;
  const int planes = S.separate_planes ? info_.channels : 1;
  const int stride_samples = S.separate_planes ? 1 : S.samples_per_pixel;
  const int copy = S.separate_planes ? 1 : info_.channels;

  const int64_t w = out.cols, h = out.rows;
  for (int64_t by = y / bh; by <= (y + h - 1) / bh; ++by) {
    for (int64_t bx = x / bw; bx <= (x + w - 1) / bw; ++bx) {
      const int64_t x0 = std::max(x, bx * bw), x1 = std::min(x + w, (bx + 1) * bw);
      const int64_t y0 = std::max(y, by * bh), y1 = std::min(y + h, (by + 1) * bh);
      for (int plane = 0; plane < planes; ++plane) {
        const auto index = static_cast<uint32_t>(plane * int64_t{S.blocks_per_plane} + by * S.blocks_across + bx);
        const Decoder decode = [&](Reader& r, std::vector<uint8_t>& buffer) -> size_t {
          TIFF* tif = r.handle.get();
          const uint32_t libtiff_index =
              tiled ? TIFFComputeTile(tif, static_cast<uint32_t>(bx * bw), static_cast<uint32_t>(by * bh), 0,
                                      static_cast<uint16_t>(plane))
                    : TIFFComputeStrip(tif, static_cast<uint32_t>(by * bh), static_cast<uint16_t>(plane));
          if (libtiff_index != index)
            r.handle.fail(fmt::format("{} numbering of level {} disagrees with libtiff ({} vs {})", kind, level, index,
                                      libtiff_index));
          const tmsize_t block_bytes = tiled ? TIFFTileSize(tif) : TIFFStripSize(tif);
          if (block_bytes <= 0) r.handle.fail(fmt::format("invalid {} size at level {}", kind, level));
          int err = 0;
          const uint64_t offset = TIFFGetStrileOffsetWithErr(tif, index, &err);
          const uint64_t bytes = err ? 0 : TIFFGetStrileByteCountWithErr(tif, index, &err);
          if (err || bytes == 0 || offset > file_size_ || bytes > file_size_ - offset)
            r.handle.fail(fmt::format("{} {} of level {} lies outside the file (offset {}, {} bytes, file size {}): "
                                      "the file is truncated or corrupt",
                                      kind, index, level, offset, bytes, file_size_));
          // Allocated only once a block is known to lie in the file: a tiny hostile file
          // declaring huge blocks must not cost a 256 MiB buffer per read.
          if (buffer.size() < static_cast<size_t>(block_bytes)) buffer.resize(static_cast<size_t>(block_bytes));
          const tmsize_t got = tiled ? TIFFReadEncodedTile(tif, index, buffer.data(), block_bytes)
                                     : TIFFReadEncodedStrip(tif, index, buffer.data(), block_bytes);
          std::string errors = r.handle.take_errors();
          if (got < 0 || !errors.empty())
            throw Error(fmt::format("{}: cannot decode {} {} of level {}: {}", info_.path, kind, index, level,
                                    errors.empty() ? "data ends early" : errors));
          return static_cast<size_t>(got);
        };
        const BlockView block = fetch_block(reader, level, index, decode);
        // A short block (a truncated last strip) serves the reads that need only its rows.
        const int64_t rows_needed = y1 - by * bh;
        const int64_t bytes_needed = rows_needed * bw * stride_samples * (info_.bits / 8);
        if (static_cast<int64_t>(block.valid) < bytes_needed)
          throw Error(fmt::format("{}: cannot decode {} {} of level {}: data ends early", info_.path, kind, index, level));
        if (info_.bits == 8)
          copy_block<uint8_t>(block.data, bw, stride_samples, copy, plane, x0 - bx * bw, y0 - by * bh, out, x0 - x,
                              y0 - y, x1 - x0, y1 - y0);
        else
          copy_block<uint16_t>(block.data, bw, stride_samples, copy, plane, x0 - bx * bw, y0 - by * bh, out, x0 - x,
                               y0 - y, x1 - x0, y1 - y0);
      }
    }
  }
}

void TiffSource::read_blocks_rgba(const ReaderOnDemand& reader, int level, int64_t x, int64_t y, cv::Mat& out) const {
  const LevelInfo& L = info_.levels[level];
  const LevelStorage& S = storage_[level];
  const bool tiled = L.layout == Layout::tiled;
  const int64_t bw = L.block_width, bh = L.block_height;
  const int64_t w = out.cols, h = out.rows;
  for (int64_t by = y / bh; by <= (y + h - 1) / bh; ++by) {
    for (int64_t bx = x / bw; bx <= (x + w - 1) / bw; ++bx) {
      const int64_t x0 = std::max(x, bx * bw), x1 = std::min(x + w, (bx + 1) * bw);
      const int64_t y0 = std::max(y, by * bh), y1 = std::min(y + h, (by + 1) * bh);
      const auto index = static_cast<uint32_t>(by * S.blocks_across + bx);
      const Decoder decode = [&](Reader& r, std::vector<uint8_t>& buffer) -> size_t {
        TIFF* tif = r.handle.get();
        const auto bytes = static_cast<size_t>(bw * bh) * sizeof(uint32_t);
        if (buffer.size() < bytes) buffer.resize(bytes);
        // operator new's alignment suits uint32_t.
        auto* raster = reinterpret_cast<uint32_t*>(buffer.data());
        const int ok = tiled ? TIFFReadRGBATile(tif, static_cast<uint32_t>(bx * bw), static_cast<uint32_t>(by * bh), raster)
                             : TIFFReadRGBAStrip(tif, static_cast<uint32_t>(by * bh), raster);
        std::string errors = r.handle.take_errors();
        if (!ok || !errors.empty())
          throw Error(fmt::format("{}: cannot decode {} at ({}, {}) of level {}: {}", info_.path,
                                  tiled ? "tile" : "strip", bx * bw, by * bh, level,
                                  errors.empty() ? "libtiff's RGBA reader failed" : errors));
        return bytes;
      };
      const BlockView block = fetch_block(reader, level, index, decode);
      const auto* raster = reinterpret_cast<const uint32_t*>(block.data);
      // The RGBA readers put the block's first row last (raster origin at the
      // bottom left); a strip is only as tall as the rows left in the image.
      const int64_t raster_rows = tiled ? bh : std::min(bh, L.height - by * bh);
      for (int64_t row = y0; row < y1; ++row) {
        const uint32_t* src = raster + (raster_rows - 1 - (row - by * bh)) * bw + (x0 - bx * bw);
        uint8_t* dst = out.ptr<uint8_t>(static_cast<int>(row - y)) + (x0 - x) * 3;
        for (int64_t col = 0; col < x1 - x0; ++col) {
          dst[col * 3 + 0] = static_cast<uint8_t>(TIFFGetR(src[col]));
          dst[col * 3 + 1] = static_cast<uint8_t>(TIFFGetG(src[col]));
          dst[col * 3 + 2] = static_cast<uint8_t>(TIFFGetB(src[col]));
        }
      }
    }
  }
}

}  // namespace bigtrain::tiler
