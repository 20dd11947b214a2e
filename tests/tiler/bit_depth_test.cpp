// Bit depth: 12-bit data stored in 16-bit samples reaches full brightness at its
// declared maximum (MaxSampleValue or SMaxSampleValue), not at 65535; plain 16-bit
// and 8-bit data keep the storage's scale. The TIFFs are written by tifffile (Debian's
// python3-tifffile, scripts/packages/test.txt), an independent writer.
#include <cstdlib>
#include <fstream>

#include <gtest/gtest.h>

#include "tiler/background.hpp"
#include "tiler/image_source.hpp"
#include "tiler_test_support.hpp"

namespace bigtrain::tiler {
namespace {

using testing::ScratchDir;

constexpr const char* kPython = "/usr/bin/python3";

// A 64 x 48 ramp: column x holds round(x * top / 63) in every row.
void write_with_tifffile(const ScratchDir& dir, const std::string& name, int top, const std::string& extratags,
                         bool tiled) {
  const std::string script = dir.file(name + ".py");
  std::ofstream(script) << "import sys, numpy as np, tifffile\n"
                        << "ramp = np.round(np.arange(64) * " << top << " / 63).astype(np.uint16)\n"
                        << "image = np.tile(ramp, (48, 1))\n"
                        << "tifffile.imwrite(sys.argv[1], image, photometric='minisblack', extratags=[" << extratags
                        << "]" << (tiled ? ", tile=(16, 16)" : "") << ")\n";
  const std::string command = std::string(kPython) + " " + script + " " + dir.file(name + ".tif");
  ASSERT_EQ(std::system(command.c_str()), 0)
      << command << " failed: python3-tifffile and python3-numpy are needed (scripts/packages/test.txt)";
}

TEST(BitDepth, MaxSampleValueIsFullScaleFor12BitData) {
  ScratchDir dir;
  write_with_tifffile(dir, "max", 4095, "(281, 'H', 1, 4095, True)", false);
  auto source = open_image(dir.file("max.tif"));
  const ImageInfo& info = source->info();
  EXPECT_EQ(info.bits, 16);
  EXPECT_EQ(info.max_value, 4095);
  EXPECT_EQ(info.max_value_from, "MaxSampleValue");
  EXPECT_EQ(info.full_scale(), 4095);
  // The thumbnail reaches white at 4095 (at 1/257 the brightest column was grey 16).
  const Thumbnail thumb = make_thumbnail(*source, 64);
  ASSERT_EQ(thumb.pixels.size(), cv::Size(64, 48));
  EXPECT_EQ(thumb.pixels.at<uint8_t>(10, 63), 255);
  EXPECT_EQ(thumb.pixels.at<uint8_t>(10, 0), 0);
  for (int x = 0; x < 64; ++x) {
    const double value = std::round(x * 4095.0 / 63.0);
    EXPECT_NEAR(thumb.pixels.at<uint8_t>(20, x), value * 255.0 / 4095.0, 0.5 + 1e-9) << x;
  }
}

TEST(BitDepth, SMaxSampleValueIsFullScaleAndWinsOverMaxSampleValue) {
  ScratchDir dir;
  write_with_tifffile(dir, "smax", 4095, "(341, 'd', 1, 4095.0, True), (281, 'H', 1, 16383, True)", true);
  auto source = open_image(dir.file("smax.tif"));
  EXPECT_EQ(source->info().max_value, 4095);
  EXPECT_EQ(source->info().max_value_from, "SMaxSampleValue");
  EXPECT_EQ(make_thumbnail(*source, 64).pixels.at<uint8_t>(0, 63), 255);
  // A caller's override (data.max_value) replaces the header's.
  EXPECT_EQ(make_thumbnail(*source, 64, 8190).pixels.at<uint8_t>(0, 63), 128);
}

TEST(BitDepth, Plain16BitKeepsTheStorageScale) {
  ScratchDir dir;
  write_with_tifffile(dir, "plain", 65535, "", true);
  auto source = open_image(dir.file("plain.tif"));
  EXPECT_EQ(source->info().max_value, 0);
  EXPECT_EQ(source->info().full_scale(), 65535);
  const Thumbnail thumb = make_thumbnail(*source, 64);
  EXPECT_EQ(thumb.pixels.at<uint8_t>(0, 63), 255);
  EXPECT_EQ(thumb.pixels.at<uint8_t>(0, 32), static_cast<int>(std::lround(std::round(32 * 65535.0 / 63) / 257.0)));
  // A declared maximum equal to the storage's limit says nothing new.
  write_with_tifffile(dir, "full", 65535, "(281, 'H', 1, 65535, True)", false);
  EXPECT_EQ(open_image(dir.file("full.tif"))->info().max_value, 0);
}

}  // namespace
}  // namespace bigtrain::tiler
