#pragma once
// Shared helpers for the tiler tests: a scratch directory per test and the known
// pixel patterns the test files are written with.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include <gtest/gtest.h>
#include <opencv2/core.hpp>

#include "kernels/core/error.hpp"

namespace bigtrain::tiler::testing {

// A fresh directory for one test, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "tiler";
    for (char& c : name)
      if (c == '/') c = '_';
    path_ = std::filesystem::temp_directory_path() / ("bigtrain-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Every pixel different from its neighbours, so a shifted or mis-stitched read shows.
inline int hashed_value(int level, int64_t x, int64_t y, int channel, int bits) {
  uint64_t h = static_cast<uint64_t>(x) * 0x9E3779B1u ^ static_cast<uint64_t>(y) * 0x85EBCA77u ^
               static_cast<uint64_t>(channel) * 0xC2B2AE3Du ^ static_cast<uint64_t>(level) * 0x27D4EB2Fu;
  h ^= h >> 15;
  h *= 0x2C1B3C6Du;
  h ^= h >> 12;
  return static_cast<int>(h & (bits == 16 ? 0xFFFF : 0xFF));
}

// Smooth, so lossy JPEG stays close to it.
inline int smooth_value(int level, int64_t x, int64_t y, int channel, int bits) {
  const double v = 128 + 90 * std::sin(x / 23.0 + channel) * std::cos(y / 17.0 - level);
  return static_cast<int>(v) * (bits == 16 ? 257 : 1);
}

using Pattern = std::function<int(int level, int64_t x, int64_t y, int channel, int bits)>;

inline void fill_pattern(const Pattern& pattern, int level, const cv::Rect& rect, cv::Mat& pixels) {
  const int channels = pixels.channels(), bits = pixels.depth() == CV_16U ? 16 : 8;
  for (int r = 0; r < rect.height; ++r)
    for (int c = 0; c < rect.width; ++c)
      for (int ch = 0; ch < channels; ++ch) {
        const int v = pattern(level, rect.x + c, rect.y + r, ch, bits);
        if (bits == 8) pixels.ptr<uint8_t>(r)[c * channels + ch] = static_cast<uint8_t>(v);
        else pixels.ptr<uint16_t>(r)[c * channels + ch] = static_cast<uint16_t>(v);
      }
}

inline cv::Mat expected_region(const Pattern& pattern, int level, const cv::Rect& rect, int type) {
  cv::Mat out(rect.size(), type);
  fill_pattern(pattern, level, rect, out);
  return out;
}

// Largest absolute difference between two Mats of the same size and type.
inline double max_abs_diff(const cv::Mat& a, const cv::Mat& b) {
  return cv::norm(a.reshape(1), b.reshape(1), cv::NORM_INF);
}

// Runs `statement`, expecting bigtrain::Error whose message contains every needle.
template <typename F>
void expect_error(F&& statement, std::initializer_list<std::string> needles) {
  try {
    statement();
    ADD_FAILURE() << "expected bigtrain::Error mentioning " << *needles.begin();
  } catch (const bigtrain::Error& error) {
    for (const std::string& needle : needles)
      EXPECT_NE(std::string(error.what()).find(needle), std::string::npos) << "message: " << error.what() << "\nmissing: " << needle;
  }
}

}  // namespace bigtrain::tiler::testing
