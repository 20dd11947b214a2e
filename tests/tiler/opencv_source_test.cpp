// PNG, JPEG and BMP through OpenCV, chosen by magic bytes, in RGB order.
#include <gtest/gtest.h>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "tiler/image_source.hpp"
#include "tiler/image_writer.hpp"
#include "tiler/tiff_writer.hpp"
#include "tiler_test_support.hpp"

namespace bigtrain::tiler {
namespace {

using testing::ScratchDir;

// Writes `rgb` (RGB order) with OpenCV, which expects BGR.
void write_with_opencv(const std::string& path, const cv::Mat& rgb, const std::string& ext) {
  cv::Mat bgr;
  if (rgb.channels() == 3) cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
  else bgr = rgb;
  std::vector<uchar> bytes;
  ASSERT_TRUE(cv::imencode(ext, bgr, bytes));
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

TEST(OpenCvSource, PngBmpAndJpegReadBackInRgb) {
  ScratchDir dir;
  const cv::Rect all(0, 0, 123, 77);
  const cv::Mat rgb8 = testing::expected_region(testing::hashed_value, 0, all, CV_8UC3);
  const cv::Mat grey16 = testing::expected_region(testing::hashed_value, 0, all, CV_16UC1);
  const cv::Mat smooth = testing::expected_region(testing::smooth_value, 0, all, CV_8UC3);
  struct Case {
    std::string file, ext, format;
    cv::Mat pixels;
    double tolerance;
  };
  // JPEG at OpenCV's default quality 95 on a smooth pattern: a few grey levels.
  const std::vector<Case> cases = {{"rgb8.png", ".png", "png", rgb8, 0},
                                   {"grey16.png", ".png", "png", grey16, 0},
                                   {"rgb8.bmp", ".bmp", "bmp", rgb8, 0},
                                   {"smooth.jpg", ".jpg", "jpeg", smooth, 12}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string path = dir.file(c.file);
    write_with_opencv(path, c.pixels, c.ext);
    auto source = open_image(path);
    const ImageInfo& info = source->info();
    EXPECT_EQ(info.format, c.format);
    EXPECT_EQ(info.width(), 123);
    EXPECT_EQ(info.height(), 77);
    EXPECT_EQ(info.channels, c.pixels.channels());
    EXPECT_EQ(info.bits, c.pixels.depth() == CV_16U ? 16 : 8);
    EXPECT_EQ(info.levels[0].layout, Layout::whole);
    const cv::Rect region(100, 50, 23, 27);
    cv::Mat got = source->read_region(0, region.x, region.y, region.width, region.height);
    ASSERT_EQ(got.type(), c.pixels.type());
    EXPECT_LE(testing::max_abs_diff(got, c.pixels(region)), c.tolerance);
  }
}

TEST(OpenCvSource, FormatComesFromMagicBytesNotTheExtension) {
  ScratchDir dir;
  const cv::Mat rgb8 = testing::expected_region(testing::hashed_value, 0, {0, 0, 40, 30}, CV_8UC3);
  const std::string png_named_tif = dir.file("really-a-png.tif");
  write_with_opencv(png_named_tif, rgb8, ".png");
  EXPECT_EQ(open_image(png_named_tif)->info().format, "png");
  TiffWriteOptions o;
  o.width = 40;
  o.height = 30;
  const std::string tif_named_png = dir.file("really-a-tiff.png");
  write_tiff(tif_named_png, o, [&](int, const cv::Rect& rect, cv::Mat& pixels) { rgb8(rect).copyTo(pixels); });
  auto source = open_image(tif_named_png);
  EXPECT_EQ(source->info().format, "tiff");
  EXPECT_EQ(testing::max_abs_diff(source->read_region(0, 0, 0, 40, 30), rgb8), 0);
}

TEST(OpenCvSource, TruncatedPngBodyIsAnErrorOnRead) {
  ScratchDir dir;
  const std::string path = dir.file("cut.png");
  write_with_opencv(path, testing::expected_region(testing::hashed_value, 0, {0, 0, 200, 200}, CV_8UC3), ".png");
  std::filesystem::resize_file(path, 400);
  auto source = open_image(path);  // the header is intact
  testing::expect_error([&] { source->read_region(0, 0, 0, 10, 10); }, {path, "cannot decode"});
}

}  // namespace
}  // namespace bigtrain::tiler

namespace bigtrain::tiler {
namespace {

TEST(ImageWriter, PngTilesRoundTripExactlyInRgbAnd16Bit) {
  testing::ScratchDir dir;
  for (int type : {CV_8UC3, CV_16UC3, CV_8UC1, CV_16UC1}) {
    const cv::Mat pixels = testing::expected_region(testing::hashed_value, 0, {0, 0, 37, 29}, type);
    const std::string path = dir.file("tile.png");
    write_image_file(path, pixels);
    auto source = open_image(path);
    ASSERT_EQ(source->info().cv_type(), type);
    EXPECT_EQ(testing::max_abs_diff(source->read_region(0, 0, 0, 37, 29), pixels), 0) << "type " << type;
  }
  testing::expect_error([&] { write_image_file(dir.file("no-such-folder/x.png"), cv::Mat(4, 4, CV_8UC1)); }, {"no-such-folder/x.png"});
}

}  // namespace
}  // namespace bigtrain::tiler
