// Every input the tiler cannot read is a bigtrain::Error naming the file and the
// reason: never a crash, a hang, or an allocation of the declared image.
#include <filesystem>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>
#include <tiffio.h>

#include "tiler/image_source.hpp"
#include "tiler/tiff_writer.hpp"
#include "tiler_test_support.hpp"

namespace bigtrain::tiler {
namespace {

using testing::expect_error;
using testing::ScratchDir;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

struct Entry {
  uint16_t tag;
  uint16_t type;  // 3 = SHORT, 4 = LONG
  uint32_t value;
};

// A minimal little-endian classic TIFF: one IFD at offset 8 with single-valued
// entries, then zero padding up to `size` bytes. Lets a test declare any header.
std::string handmade_tiff(std::vector<Entry> entries, size_t size = 1024) {
  std::string out("II*\0\x08\0\0\0", 8);
  auto put16 = [&](uint32_t v) { out.push_back(static_cast<char>(v & 0xFF)), out.push_back(static_cast<char>(v >> 8)); };
  auto put32 = [&](uint32_t v) { put16(v & 0xFFFF), put16(v >> 16); };
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.tag < b.tag; });
  put16(static_cast<uint32_t>(entries.size()));
  for (const Entry& e : entries) {
    put16(e.tag);
    put16(e.type);
    put32(1);
    if (e.type == 3) put16(e.value), put16(0);
    else put32(e.value);
  }
  put32(0);
  out.resize(std::max(out.size(), size), '\0');
  return out;
}

std::vector<Entry> grey_strip_header(uint32_t width, uint32_t height, uint32_t offset, uint32_t bytes) {
  return {{TIFFTAG_IMAGEWIDTH, 4, width},     {TIFFTAG_IMAGELENGTH, 4, height}, {TIFFTAG_BITSPERSAMPLE, 3, 8},
          {TIFFTAG_COMPRESSION, 3, 1},        {TIFFTAG_PHOTOMETRIC, 3, 1},      {TIFFTAG_STRIPOFFSETS, 4, offset},
          {TIFFTAG_SAMPLESPERPIXEL, 3, 1},    {TIFFTAG_ROWSPERSTRIP, 4, height}, {TIFFTAG_STRIPBYTECOUNTS, 4, bytes}};
}

// A 16x16 file through libtiff's own writer with the given sample layout.
std::string libtiff_file(const ScratchDir& dir, const std::string& name, uint16_t photometric, uint16_t spp, uint16_t bits,
                         uint16_t sample_format = SAMPLEFORMAT_UINT) {
  const std::string path = dir.file(name);
  TIFF* tif = TIFFOpen(path.c_str(), "w");
  EXPECT_NE(tif, nullptr);
  TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, 16);
  TIFFSetField(tif, TIFFTAG_IMAGELENGTH, 16);
  TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, spp);
  TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, bits);
  TIFFSetField(tif, TIFFTAG_SAMPLEFORMAT, sample_format);
  TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, photometric);
  TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
  TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, 16);
  if (photometric == PHOTOMETRIC_PALETTE) {
    std::vector<uint16_t> map(size_t{1} << bits, 0);
    TIFFSetField(tif, TIFFTAG_COLORMAP, map.data(), map.data(), map.data());
  }
  if (photometric == PHOTOMETRIC_SEPARATED) TIFFSetField(tif, TIFFTAG_INKSET, INKSET_CMYK);
  std::vector<uint8_t> line(TIFFScanlineSize(tif), 0x5A);
  for (int y = 0; y < 16; ++y) TIFFWriteScanline(tif, line.data(), y, 0);
  TIFFClose(tif);
  return path;
}

// Opens and reads every row band, as the tiler would.
void open_and_read_all(const std::string& path) {
  auto source = open_image(path);
  const ImageInfo& info = source->info();
  for (int64_t y = 0; y < info.height(); y += 64)
    source->read_region(0, 0, y, info.width(), std::min<int64_t>(64, info.height() - y));
}

TEST(BadInput, MissingEmptyAndUnknownFiles) {
  ScratchDir dir;
  const std::string missing = dir.file("missing.tif");
  expect_error([&] { open_image(missing); }, {missing, "cannot open"});
  const std::string empty = dir.file("empty.tif");
  write_bytes(empty, "");
  expect_error([&] { open_image(empty); }, {empty, "empty"});
  const std::string text = dir.file("notes.tif");
  write_bytes(text, "this is not an image at all\n");
  expect_error([&] { open_image(text); }, {text, "not a supported image"});
}

TEST(BadInput, TruncatedHeaderAndIfdPastTheEnd) {
  ScratchDir dir;
  const std::string truncated = dir.file("truncated-header.tif");
  write_bytes(truncated, std::string("II*\0\x08\0", 6));
  expect_error([&] { open_image(truncated); }, {truncated, "cannot open as TIFF"});
  const std::string past_end = dir.file("ifd-past-end.tif");
  write_bytes(past_end, std::string("II*\0\xF0\xFF\xFF\x7F", 8) + std::string(64, '\0'));
  expect_error([&] { open_image(past_end); }, {past_end, "cannot open as TIFF"});
}

TEST(BadInput, AbsurdDeclaredSizes) {
  ScratchDir dir;
  const std::string striped = dir.file("huge-striped.tif");
  // (No RowsPerStrip: one strip, so libtiff accepts the header and our check speaks.)
  std::vector<Entry> huge = grey_strip_header(1u << 31, 1u << 31, 512, 256);
  huge.erase(huge.begin() + 7);
  write_bytes(striped, handmade_tiff(huge));
  expect_error([&] { open_image(striped); }, {striped, "absurd size 2147483648x2147483648"});
  // Tiled: the tile count alone overflows; libtiff or our checks must refuse it.
  const std::string tiled = dir.file("huge-tiled.tif");
  write_bytes(tiled, handmade_tiff({{TIFFTAG_IMAGEWIDTH, 4, 1u << 31}, {TIFFTAG_IMAGELENGTH, 4, 1u << 31},
                                    {TIFFTAG_BITSPERSAMPLE, 3, 8}, {TIFFTAG_COMPRESSION, 3, 1}, {TIFFTAG_PHOTOMETRIC, 3, 1},
                                    {TIFFTAG_SAMPLESPERPIXEL, 3, 1}, {TIFFTAG_TILEWIDTH, 4, 256}, {TIFFTAG_TILELENGTH, 4, 256},
                                    {TIFFTAG_TILEOFFSETS, 4, 512}, {TIFFTAG_TILEBYTECOUNTS, 4, 256}}));
  expect_error([&] { open_image(tiled); }, {tiled});
}

TEST(BadInput, BlocksOutsideTheFile) {
  ScratchDir dir;
  const std::string strip = dir.file("strip-past-end.tif");
  write_bytes(strip, handmade_tiff(grey_strip_header(16, 16, 100000, 256), 768));
  expect_error([&] { open_and_read_all(strip); }, {strip, "outside the file"});
  // (libtiff repairs the byte count of a lone uncompressed strip itself, so the
  // over-long count is checked on a compressed one.)
  std::vector<Entry> packbits = grey_strip_header(16, 16, 512, 100000);
  packbits[3].value = COMPRESSION_PACKBITS;
  const std::string long_strip = dir.file("strip-count-past-end.tif");
  write_bytes(long_strip, handmade_tiff(packbits, 768));
  expect_error([&] { open_and_read_all(long_strip); }, {long_strip, "outside the file"});
  const std::string tile = dir.file("tile-past-end.tif");
  write_bytes(tile, handmade_tiff({{TIFFTAG_IMAGEWIDTH, 4, 16}, {TIFFTAG_IMAGELENGTH, 4, 16}, {TIFFTAG_BITSPERSAMPLE, 3, 8},
                                   {TIFFTAG_COMPRESSION, 3, 1}, {TIFFTAG_PHOTOMETRIC, 3, 1}, {TIFFTAG_SAMPLESPERPIXEL, 3, 1},
                                   {TIFFTAG_TILEWIDTH, 4, 16}, {TIFFTAG_TILELENGTH, 4, 16}, {TIFFTAG_TILEOFFSETS, 4, 100000},
                                   {TIFFTAG_TILEBYTECOUNTS, 4, 256}}));
  expect_error([&] { open_and_read_all(tile); }, {tile, "outside the file"});
  // A well-formed header over good data reads fine: the checks are not just refusing.
  const std::string good = dir.file("good.tif");
  write_bytes(good, handmade_tiff(grey_strip_header(16, 16, 512, 256), 768));
  EXPECT_NO_THROW(open_and_read_all(good));
}

TEST(BadInput, TruncatedAndCorruptData) {
  ScratchDir dir;
  TiffWriteOptions o;
  o.width = o.height = 300;
  o.block_size = 64;
  const std::string path = dir.file("truncated.tif");
  write_tiff(path, o, [](int level, const cv::Rect& rect, cv::Mat& pixels) { testing::fill_pattern(testing::hashed_value, level, rect, pixels); });
  const std::string corrupt = dir.file("corrupt.tif");
  std::filesystem::copy_file(path, corrupt);
  // Deflate data beats the directory (libtiff writes it last), so cutting the file
  // loses the header; cutting less than that loses the end of the tile data.
  std::filesystem::resize_file(path, std::filesystem::file_size(path) * 6 / 10);
  expect_error([&] { open_and_read_all(path); }, {path});
  {
    std::fstream file(corrupt, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(4096);
    const std::string garbage(2048, '\x7F');
    file.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
  }
  expect_error([&] { open_and_read_all(corrupt); }, {corrupt, "cannot decode"});
}

TEST(BadInput, UnsupportedSampleLayouts) {
  ScratchDir dir;
  const std::string floats = libtiff_file(dir, "float.tif", PHOTOMETRIC_MINISBLACK, 1, 32, SAMPLEFORMAT_IEEEFP);
  expect_error([&] { open_image(floats); }, {floats, "floating-point"});
  const std::string bilevel = libtiff_file(dir, "bilevel.tif", PHOTOMETRIC_MINISWHITE, 1, 1);
  expect_error([&] { open_image(bilevel); }, {bilevel, "1-bit"});
  const std::string palette = libtiff_file(dir, "palette.tif", PHOTOMETRIC_PALETTE, 1, 8);
  expect_error([&] { open_image(palette); }, {palette, "palette"});
  const std::string cmyk = libtiff_file(dir, "cmyk.tif", PHOTOMETRIC_SEPARATED, 4, 8);
  expect_error([&] { open_image(cmyk); }, {cmyk, "CMYK"});
  const std::string signed16 = libtiff_file(dir, "signed.tif", PHOTOMETRIC_MINISBLACK, 1, 16, SAMPLEFORMAT_INT);
  expect_error([&] { open_image(signed16); }, {signed16, "sample format"});
  const std::string twelve = libtiff_file(dir, "twelve.tif", PHOTOMETRIC_MINISBLACK, 1, 12);
  expect_error([&] { open_image(twelve); }, {twelve, "12 bits"});
}

TEST(BadInput, RegionsOutsideTheImageOrTooLarge) {
  ScratchDir dir;
  const std::string path = dir.file("small.tif");
  write_bytes(path, handmade_tiff(grey_strip_header(16, 16, 512, 256), 768));
  auto source = open_image(path);
  expect_error([&] { source->read_region(0, 10, 10, 7, 2); }, {path, "not inside level 0"});
  expect_error([&] { source->read_region(0, -1, 0, 2, 2); }, {path, "not inside"});
  expect_error([&] { source->read_region(1, 0, 0, 2, 2); }, {path, "level 1 does not exist"});
}

TEST(BadInput, BrokenPngJpegAndBmpHeaders) {
  ScratchDir dir;
  const std::string png = dir.file("broken.png");
  write_bytes(png, std::string("\x89PNG\r\n\x1a\n\0\0", 10));
  expect_error([&] { open_image(png); }, {png, "PNG"});
  const std::string jpeg = dir.file("broken.jpg");
  write_bytes(jpeg, std::string("\xFF\xD8\xFF\xE0\0\x10JFIF", 10));
  expect_error([&] { open_image(jpeg); }, {jpeg, "JPEG"});
  // A 100-byte PNG declaring 20000x20000 is refused before any decode allocates.
  const std::string huge = dir.file("huge.png");
  std::string header("\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR\0\0\x4e\x20\0\0\x4e\x20\x08\x02\0\0\0", 29);
  write_bytes(huge, header + std::string(71, '\0'));
  expect_error([&] { open_image(huge); }, {huge, "declares 20000x20000 but the file has only 100 bytes"});
  const std::string bmp = dir.file("broken.bmp");
  write_bytes(bmp, "BM\x10");
  expect_error([&] { open_image(bmp); }, {bmp, "BMP"});
}

}  // namespace
}  // namespace bigtrain::tiler
