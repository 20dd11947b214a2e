// Region reads in every TIFF layout the tiler supports equal the pixels written.
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <opencv2/imgproc.hpp>

#include "tiler/image_source.hpp"
#include "tiler/tiff_writer.hpp"
#include <tiffio.h>
#include "tiler_test_support.hpp"

namespace bigtrain::tiler {
namespace {

using testing::ScratchDir;

struct LayoutCase {
  std::string name;
  TiffWriteOptions options;
  std::string compression;  // as info() reports it
};

TiffWriteOptions make(int64_t w, int64_t h, int channels, int bits, TiffCompression compression, int tile, int rows = 0) {
  TiffWriteOptions o;
  o.width = w;
  o.height = h;
  o.channels = channels;
  o.bits = bits;
  o.compression = compression;
  o.tiled = tile > 0;
  if (tile > 0) o.block_size = tile;
  else o.rows_per_strip = rows;
  return o;
}

std::vector<LayoutCase> layout_cases() {
  using C = TiffCompression;
  std::vector<LayoutCase> cases;
  auto add = [&](std::string name, TiffWriteOptions o, std::string compression) { cases.push_back({name, o, compression}); };
  add("tiled_none_rgb8", make(301, 217, 3, 8, C::none, 64), "none");
  add("tiled_lzw_grey16", make(190, 301, 1, 16, C::lzw, 32), "lzw");
  add("tiled_deflate_rgb8", make(257, 129, 3, 8, C::deflate, 128), "deflate");
  add("tiled_packbits_grey8", make(97, 203, 1, 8, C::packbits, 48), "packbits");
  add("tiled_jpeg_ycbcr", make(250, 170, 3, 8, C::jpeg, 64), "jpeg");
  auto rgb_jpeg = make(250, 170, 3, 8, C::jpeg, 64);
  rgb_jpeg.jpeg_ycbcr = false;
  add("tiled_jpeg_rgb", rgb_jpeg, "jpeg");
  add("tiled_jpeg_grey", make(133, 77, 1, 8, C::jpeg, 32), "jpeg");
  auto big = make(211, 199, 3, 16, C::deflate, 64);
  big.bigtiff = true;
  add("tiled_deflate_rgb16_bigtiff", big, "deflate");
  auto separate = make(201, 131, 3, 16, C::deflate, 48);
  separate.separate_planes = true;
  add("tiled_deflate_rgb16_separate", separate, "deflate");
  auto white = make(150, 90, 1, 16, C::lzw, 32);
  white.min_is_white = true;
  add("tiled_lzw_grey16_miniswhite", white, "lzw");
  add("striped_none_rgb8", make(203, 111, 3, 8, C::none, 0, 7), "none");
  auto striped_separate = make(177, 93, 3, 8, C::lzw, 0, 10);
  striped_separate.separate_planes = true;
  add("striped_lzw_rgb8_separate", striped_separate, "lzw");
  auto striped_white = make(120, 95, 1, 8, C::deflate, 0, 9);
  striped_white.min_is_white = true;
  add("striped_deflate_grey8_miniswhite", striped_white, "deflate");
  add("striped_jpeg_ycbcr", make(180, 100, 3, 8, C::jpeg, 0, 16), "jpeg");
  auto striped_big = make(150, 77, 3, 16, C::packbits, 0, 5);
  striped_big.bigtiff = true;
  add("striped_packbits_rgb16_bigtiff", striped_big, "packbits");
  add("striped_one_strip_grey16", make(64, 33, 1, 16, C::none, 0, 33), "none");
  return cases;
}

void PrintTo(const LayoutCase& c, std::ostream* os) { *os << c.name; }

class TiffLayouts : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(TiffLayouts, RegionReadsEqualWrittenPixels) {
  const LayoutCase& c = GetParam();
  const bool lossy = c.options.compression == TiffCompression::jpeg;
  const testing::Pattern pattern = lossy ? testing::Pattern(testing::smooth_value) : testing::Pattern(testing::hashed_value);
  ScratchDir dir;
  const std::string path = dir.file(c.name + ".tif");
  write_tiff(path, c.options, [&](int level, const cv::Rect& rect, cv::Mat& pixels) { testing::fill_pattern(pattern, level, rect, pixels); });

  auto source = open_image(path);
  const ImageInfo& info = source->info();
  EXPECT_EQ(info.width(), c.options.width);
  EXPECT_EQ(info.height(), c.options.height);
  EXPECT_EQ(info.channels, c.options.channels);
  EXPECT_EQ(info.bits, c.options.bits);
  EXPECT_EQ(info.format, c.options.bigtiff ? "bigtiff" : "tiff");
  EXPECT_EQ(info.planar_separate, c.options.separate_planes);
  ASSERT_EQ(info.levels.size(), 1u);
  EXPECT_EQ(info.levels[0].compression, c.compression);
  EXPECT_EQ(info.levels[0].layout, c.options.tiled ? Layout::tiled : Layout::striped);
  const int block_w = info.levels[0].block_width, block_h = info.levels[0].block_height;
  if (c.options.tiled) {
    EXPECT_EQ(block_w, c.options.block_size);
    EXPECT_EQ(block_h, c.options.block_size);
  } else if (c.options.compression != TiffCompression::none) {
    // (libtiff may re-chop uncompressed strips into smaller ones; any height works.)
    EXPECT_EQ(block_h, std::min<int64_t>(c.options.rows_per_strip, c.options.height));
  }

  const int W = static_cast<int>(c.options.width), H = static_cast<int>(c.options.height);
  const std::vector<cv::Rect> regions = {
      {0, 0, W, H},                                                     // everything
      {block_w - 3, block_h - 2, std::min(block_w + 7, W - block_w + 3), std::min(block_h + 5, H - block_h + 2)},  // across block borders
      {W - 1, H - 1, 1, 1},                                             // last pixel
      {W - 37, H / 3, 37, H - H / 3},                                   // along the right and bottom edges
      {5, 3, 1, H - 3},                                                 // one column through every strip
  };
  for (const cv::Rect& region : regions) {
    SCOPED_TRACE(::testing::Message() << "region " << region);
    cv::Mat got = source->read_region(0, region.x, region.y, region.width, region.height);
    ASSERT_EQ(got.type(), info.cv_type());
    ASSERT_EQ(got.size(), region.size());
    cv::Mat expected = testing::expected_region(pattern, 0, region, info.cv_type());
    // MinIsWhite is stored inverted; readers report brighter = higher.
    if (c.options.min_is_white) cv::bitwise_not(expected, expected);
    if (!lossy) {
      EXPECT_EQ(testing::max_abs_diff(got, expected), 0);
    } else {
      // JPEG at quality 90 on a smooth pattern: errors of a few grey levels, a
      // little more where 2x2 chroma subsampling meets the steepest slopes.
      EXPECT_LE(testing::max_abs_diff(got, expected), 24);
      cv::Mat diff;
      cv::absdiff(got, expected, diff);
      // The mean says the error is noise rather than a shifted read (which would
      // average tens of grey levels); one pixel is too few to average.
      if (region.area() >= 64) EXPECT_LE(cv::mean(diff.reshape(1))[0], 3.0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiler, TiffLayouts, ::testing::ValuesIn(layout_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(TiffPyramid, LevelsAsSubIfdsAndAsDirectoriesAreFound) {
  for (bool as_subifds : {true, false}) {
    SCOPED_TRACE(as_subifds ? "SubIFDs" : "directories");
    ScratchDir dir;
    const std::string path = dir.file("pyramid.tif");
    TiffWriteOptions o = make(517, 301, 3, 8, TiffCompression::deflate, 64);
    o.levels = 3;
    o.levels_as_subifds = as_subifds;
    write_tiff(path, o, [](int level, const cv::Rect& rect, cv::Mat& pixels) { testing::fill_pattern(testing::hashed_value, level, rect, pixels); });
    auto source = open_image(path);
    const ImageInfo& info = source->info();
    ASSERT_EQ(info.levels.size(), 3u);
    EXPECT_EQ(info.levels[1].width, 259);
    EXPECT_EQ(info.levels[1].height, 151);
    EXPECT_EQ(info.levels[2].width, 130);
    EXPECT_EQ(info.levels[2].height, 76);
    EXPECT_NEAR(info.levels[2].downsample, 517.0 / 130.0, 1e-12);
    for (int level = 0; level < 3; ++level) {
      const LevelInfo& L = info.levels[level];
      const cv::Rect region(static_cast<int>(L.width / 3), 10, static_cast<int>(L.width - L.width / 3), static_cast<int>(L.height - 10));
      cv::Mat got = source->read_region(level, region.x, region.y, region.width, region.height);
      EXPECT_EQ(testing::max_abs_diff(got, testing::expected_region(testing::hashed_value, level, region, info.cv_type())), 0)
          << "level " << level;
    }
    // Alternating levels makes each pooled handle switch directories back and forth.
    for (int i = 0; i < 6; ++i) {
      const int level = i % 3;
      cv::Mat got = source->read_region(level, 0, 0, 20, 20);
      EXPECT_EQ(testing::max_abs_diff(got, testing::expected_region(testing::hashed_value, level, {0, 0, 20, 20}, info.cv_type())), 0);
    }
  }
}

TEST(TiffConcurrency, ParallelReadsFromOneSourceAreExact) {
  ScratchDir dir;
  const std::string path = dir.file("parallel.tif");
  TiffWriteOptions o = make(640, 480, 3, 8, TiffCompression::deflate, 64);
  o.levels = 2;
  write_tiff(path, o, [](int level, const cv::Rect& rect, cv::Mat& pixels) { testing::fill_pattern(testing::hashed_value, level, rect, pixels); });
  auto source = open_image(path);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const int level = (t + i) % 2;
        const int x = (t * 37 + i * 53) % 200, y = (t * 29 + i * 31) % 150, w = 17 + (i * 7) % 90, h = 13 + (t * 11) % 80;
        cv::Mat got = source->read_region(level, x, y, w, h);
        if (testing::max_abs_diff(got, testing::expected_region(testing::hashed_value, level, {x, y, w, h}, CV_8UC3)) != 0)
          ++mismatches[t];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

TEST(TiffLayouts, ScanlineWrittenRgbStripsReadBack) {
  // Written with libtiff's scanline API rather than our writer, so the reader is
  // not only checked against files our own writer produced.
  ScratchDir dir;
  const std::string path = dir.file("scanlines.tif");
  const int W = 93, H = 61;
  {
    TIFF* tif = TIFFOpen(path.c_str(), "w");
    ASSERT_NE(tif, nullptr);
    TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, W);
    TIFFSetField(tif, TIFFTAG_IMAGELENGTH, H);
    TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 3);
    TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 8);
    TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_RGB);
    TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
    TIFFSetField(tif, TIFFTAG_COMPRESSION, COMPRESSION_LZW);
    TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, 6);
    std::vector<uint8_t> line(W * 3);
    for (int y = 0; y < H; ++y) {
      for (int x = 0; x < W; ++x)
        for (int ch = 0; ch < 3; ++ch) line[x * 3 + ch] = static_cast<uint8_t>(testing::hashed_value(0, x, y, ch, 8));
      ASSERT_EQ(TIFFWriteScanline(tif, line.data(), y, 0), 1);
    }
    TIFFClose(tif);
  }
  auto source = open_image(path);
  EXPECT_EQ(source->info().levels[0].block_height, 6);
  cv::Mat got = source->read_region(0, 11, 4, 70, 50);
  EXPECT_EQ(testing::max_abs_diff(got, testing::expected_region(testing::hashed_value, 0, {11, 4, 70, 50}, CV_8UC3)), 0);
}

}  // namespace
}  // namespace bigtrain::tiler

namespace bigtrain::tiler {
namespace {

// YCbCr without JPEG goes through libtiff's RGBA block readers; libtiff's own
// whole-image RGBA reader is the oracle for the block stitching and row order.
TEST(TiffLayouts, UncompressedYCbCrMatchesLibtiffsWholeImageReader) {
  // Striped only: a hand-written tiled YCbCr file was refused by libtiff's own
  // reader (tile byte count mismatch), so it could not serve as a fixture.
  for (bool tiled : {false}) {
    SCOPED_TRACE(tiled ? "tiled" : "striped");
    testing::ScratchDir dir;
    const std::string path = dir.file("ycbcr.tif");
    const int W = 37, H = 21;
    {
      TIFF* tif = TIFFOpen(path.c_str(), "w");
      ASSERT_NE(tif, nullptr);
      TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, W);
      TIFFSetField(tif, TIFFTAG_IMAGELENGTH, H);
      TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 3);
      TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 8);
      TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_YCBCR);
      TIFFSetField(tif, TIFFTAG_YCBCRSUBSAMPLING, 1, 1);
      TIFFSetField(tif, TIFFTAG_PLANARCONFIG, PLANARCONFIG_CONTIG);
      TIFFSetField(tif, TIFFTAG_COMPRESSION, COMPRESSION_NONE);
      const int bw = tiled ? 16 : W, bh = tiled ? 16 : 5;
      if (tiled) {
        TIFFSetField(tif, TIFFTAG_TILEWIDTH, bw);
        TIFFSetField(tif, TIFFTAG_TILELENGTH, bh);
      } else {
        TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, bh);
      }
      std::vector<uint8_t> block(bw * bh * 3);
      for (int by = 0; by < H; by += bh)
        for (int bx = 0; bx < W; bx += bw) {
          for (int r = 0; r < bh; ++r)
            for (int c = 0; c < bw; ++c)
              for (int ch = 0; ch < 3; ++ch)  // chroma near neutral keeps RGB in range
                block[(r * bw + c) * 3 + ch] = static_cast<uint8_t>(
                    ch == 0 ? testing::hashed_value(0, bx + c, by + r, 0, 8) : 108 + testing::hashed_value(0, bx + c, by + r, ch, 8) % 40);
          if (tiled) ASSERT_GE(TIFFWriteEncodedTile(tif, TIFFComputeTile(tif, bx, by, 0, 0), block.data(), block.size()), 0);
          else ASSERT_GE(TIFFWriteEncodedStrip(tif, TIFFComputeStrip(tif, by, 0), block.data(), std::min(bh, H - by) * bw * 3), 0);
        }
      TIFFClose(tif);
    }
    cv::Mat expected(H, W, CV_8UC3);
    {
      TIFF* tif = TIFFOpen(path.c_str(), "r");
      ASSERT_NE(tif, nullptr);
      std::vector<uint32_t> raster(W * H);
      ASSERT_EQ(TIFFReadRGBAImageOriented(tif, W, H, raster.data(), ORIENTATION_TOPLEFT, 0), 1);
      for (int i = 0; i < W * H; ++i) {
        expected.data[i * 3 + 0] = static_cast<uint8_t>(TIFFGetR(raster[i]));
        expected.data[i * 3 + 1] = static_cast<uint8_t>(TIFFGetG(raster[i]));
        expected.data[i * 3 + 2] = static_cast<uint8_t>(TIFFGetB(raster[i]));
      }
      TIFFClose(tif);
    }
    auto source = open_image(path);
    EXPECT_EQ(source->info().photometric, "ycbcr");
    for (const cv::Rect& region : {cv::Rect(0, 0, W, H), cv::Rect(13, 3, 20, 15), cv::Rect(W - 1, H - 1, 1, 1)}) {
      cv::Mat got = source->read_region(0, region.x, region.y, region.width, region.height);
      EXPECT_EQ(testing::max_abs_diff(got, expected(region)), 0) << region;
    }
  }
}

}  // namespace
}  // namespace bigtrain::tiler
