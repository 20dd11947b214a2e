// The network's input scale follows the image's real bit depth: a 12-bit image
// (tifffile, MaxSampleValue 4095) reaches 1.0 at 4095, the same full scale the
// background thumbnail uses; data.max_value overrides it. And the background keys.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "kernels/core/error.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/image_tiling.hpp"
#include "pipeline/data/preprocess.hpp"
#include "tests/support/demo_dataset.hpp"
#include "tiler/tile_reader.hpp"

namespace bigtrain {
namespace {

// 64 x 64, column x = round(x * 4095 / 63); tag 281 (MaxSampleValue) when `tagged`.
std::string write_12bit(const std::string& dir, bool tagged) {
  const std::string path = dir + (tagged ? "/tagged.tif" : "/untagged.tif");
  const std::string script = dir + "/write.py";
  std::ofstream(script) << "import sys, numpy as np, tifffile\n"
                        << "ramp = np.round(np.arange(64) * 4095 / 63).astype(np.uint16)\n"
                        << "tifffile.imwrite(sys.argv[1], np.tile(ramp, (64, 1)), photometric='minisblack'"
                        << (tagged ? ", extratags=[(281, 'H', 1, 4095, True)]" : "") << ")\n";
  const std::string command = "/usr/bin/python3 " + script + " " + path;
  EXPECT_EQ(std::system(command.c_str()), 0) << command << ": python3-tifffile is needed (scripts/packages/test.txt)";
  return path;
}

float brightest_input(const ImageTiling& plan) {
  Preprocessing p;
  p.channels = 1;
  p.mean = {0.0f};
  p.std = {1.0f};
  const cv::Mat pixels = tiler::read_tile(*plan.source, plan.sampling, plan.tiles.at(0));
  std::vector<float> out(static_cast<std::size_t>(pixels.total()));
  preprocess_tile(pixels, p, 0, out.data(), plan.full_scale);
  return *std::max_element(out.begin(), out.end());
}

TEST(BitDepthPipeline, TwelveBitImageReachesOneAtItsDeclaredMaximum) {
  const std::string dir = testing::fresh_scratch_dir("bit_depth_pipeline").string();
  std::filesystem::create_directories(dir);
  TilerConfig tiler;
  tiler.tile = 64;
  const ImageTiling tagged = image_tiling(write_12bit(dir, true), tiler, false, 0, 0);
  EXPECT_EQ(tagged.full_scale, 4095);
  EXPECT_FLOAT_EQ(brightest_input(tagged), 1.0f);
  // No tag: the storage's scale, unless data.max_value says otherwise.
  const std::string untagged = write_12bit(dir, false);
  const ImageTiling plain = image_tiling(untagged, tiler, false, 0, 0);
  EXPECT_EQ(plain.full_scale, 65535);
  EXPECT_NEAR(brightest_input(plain), 4095.0f / 65535.0f, 1e-7);
  const ImageTiling overridden = image_tiling(untagged, tiler, false, 0, 0, 4095);
  EXPECT_EQ(overridden.full_scale, 4095);
  EXPECT_FLOAT_EQ(brightest_input(overridden), 1.0f);
}

TEST(BitDepthPipeline, BackgroundAndMaxValueKeysAreReadAndChecked) {
  const Config c = parse_config(
      "data: {train: a.csv, max_value: 4095}\ntiler: {background: local_contrast, threshold: 12, min_foreground: 0.1}\n",
      "<test>");
  EXPECT_EQ(c.data.max_value, 4095);
  EXPECT_EQ(c.tiler.background, tiler::BackgroundMode::local_contrast);
  EXPECT_EQ(c.tiler.threshold, 12);
  const tiler::ForegroundOptions options = foreground_options(c.tiler);
  EXPECT_EQ(options.mode, tiler::BackgroundMode::local_contrast);
  EXPECT_EQ(options.threshold, 12);
  // The resolved config keeps them.
  const Config again = parse_config(config_to_yaml(c), "<resolved>");
  EXPECT_EQ(again.tiler.background, tiler::BackgroundMode::local_contrast);
  EXPECT_EQ(again.data.max_value, 4095);
  try {
    parse_config("data: {train: a.csv}\ntiler: {background: fixed}\n", "bad.yaml");
    FAIL() << "background fixed without a threshold must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tiler.threshold"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_config("data: {train: a.csv}\ntiler: {background: median}\n", "bad.yaml"), Error);
  EXPECT_THROW(parse_config("data: {train: a.csv, max_value: 70000}\n", "bad.yaml"), Error);
}

}  // namespace
}  // namespace bigtrain
