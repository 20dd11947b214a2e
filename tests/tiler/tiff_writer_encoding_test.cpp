// Tiles the TIFF writer compresses itself (none, Deflate: several at once, uniform
// tiles encoded once per value and their bytes reused) read back as the pixels the
// callback gave, alongside tiles that differ everywhere; and the reuse shows in the
// file size. (tiff_layouts_test covers the other layouts through the same writer.)
#include <filesystem>

#include <gtest/gtest.h>

#include "tiler/image_source.hpp"
#include "tiler/tiff_writer.hpp"
#include "tiler_test_support.hpp"

namespace bigtrain::tiler {
namespace {

using testing::ScratchDir;

// Tiles whose top-left corner is in an even tile column are one value each (two
// values alternating by tile row, as blank background and a flat stain would be);
// the others carry the hashed pattern.
int mixed_value(int64_t tile, int level, int64_t x, int64_t y, int channel, int bits) {
  if ((x / tile) % 2 == 0) return ((y / tile) % 2 == 0 ? 230 + channel : 17 * (channel + 1)) * (bits == 16 ? 257 : 1);
  return testing::hashed_value(level, x, y, channel, bits);
}

struct EncodingCase {
  std::string name;
  TiffWriteOptions options;
};

void PrintTo(const EncodingCase& c, std::ostream* os) { *os << c.name; }

std::vector<EncodingCase> cases() {
  auto make = [](int channels, int bits, TiffCompression compression) {
    TiffWriteOptions o;
    o.width = 301;  // partial edge tiles on both sides
    o.height = 203;
    o.channels = channels;
    o.bits = bits;
    o.block_size = 32;
    o.compression = compression;
    return o;
  };
  std::vector<EncodingCase> out;
  out.push_back({"deflate_rgb8", make(3, 8, TiffCompression::deflate)});
  out.push_back({"deflate_grey16", make(1, 16, TiffCompression::deflate)});
  out.push_back({"deflate_rgb16", make(3, 16, TiffCompression::deflate)});
  out.push_back({"none_rgb8", make(3, 8, TiffCompression::none)});
  auto no_predictor = make(3, 8, TiffCompression::deflate);
  no_predictor.predictor = false;
  no_predictor.deflate_level = 1;
  out.push_back({"deflate_level1_no_predictor", no_predictor});
  auto separate = make(3, 8, TiffCompression::deflate);
  separate.separate_planes = true;
  out.push_back({"deflate_separate_planes", separate});
  auto pyramid = make(3, 8, TiffCompression::deflate);
  pyramid.levels = 3;
  pyramid.bigtiff = true;
  out.push_back({"deflate_pyramid_bigtiff", pyramid});
  return out;
}

class TiffWriterEncoding : public ::testing::TestWithParam<EncodingCase> {};

TEST_P(TiffWriterEncoding, ReadsBackWhatTheCallbackGave) {
  const TiffWriteOptions& o = GetParam().options;
  const int64_t tile = o.block_size;
  const testing::Pattern pattern = [tile](int level, int64_t x, int64_t y, int channel, int bits) {
    return mixed_value(tile, level, x, y, channel, bits);
  };
  ScratchDir dir;
  const std::string path = dir.file("mixed.tif");
  write_tiff(path, o, [&](int level, const cv::Rect& rect, cv::Mat& pixels) { testing::fill_pattern(pattern, level, rect, pixels); });
  auto source = open_image(path);
  ASSERT_EQ(source->info().levels.size(), static_cast<size_t>(o.levels));
  for (int level = 0; level < o.levels; ++level) {
    const LevelInfo& info = source->info().levels[static_cast<size_t>(level)];
    SCOPED_TRACE(::testing::Message() << "level " << level);
    EXPECT_EQ(info.compression, tiff_compression_name(o.compression));
    const cv::Rect all(0, 0, static_cast<int>(info.width), static_cast<int>(info.height));
    const cv::Mat got = source->read_region(level, 0, 0, info.width, info.height);
    EXPECT_EQ(testing::max_abs_diff(got, testing::expected_region(pattern, level, all, source->info().cv_type())), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, TiffWriterEncoding, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(TiffWriterEncoding, FlatImageReadsBackAndStaysSmall) {
  // Every tile takes the reused encoding of the first (a flat 2048^2 RGB image is
  // 12 MB raw; one value Deflates to well under 2 KB per 256^2 tile).
  ScratchDir dir;
  TiffWriteOptions o;
  o.width = o.height = 2048;
  const std::string path = dir.file("flat.tif");
  write_tiff(path, o, [](int, const cv::Rect&, cv::Mat& pixels) { pixels.setTo(cv::Scalar(236, 234, 240)); });
  auto source = open_image(path);
  const cv::Mat got = source->read_region(0, 1000, 1500, 300, 548);
  EXPECT_EQ(testing::max_abs_diff(got, cv::Mat(got.size(), got.type(), cv::Scalar(236, 234, 240))), 0);
  // 64 tiles of a few hundred bytes each plus the header and offsets.
  EXPECT_LT(std::filesystem::file_size(path), 64u * 2048u);
}

}  // namespace
}  // namespace bigtrain::tiler
