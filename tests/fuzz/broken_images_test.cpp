// The committed corpus of broken images (tests/data/broken_images, written by
// tests/fuzz/make_broken_images.py, plus whatever fuzzing adds) must each give a
// bigtrain::Error naming the file: never a crash, a hang or a huge allocation.
// The fuzz seeds are the control group: every one must read cleanly, so the errors
// above come from the damage, not from a reader that refuses everything.
// (tests/tiler/bad_input_test.cpp builds its bad inputs in code and checks the
// wording of each message; this test guards the files as they are on disk.)
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/core/error.hpp"
#include "tiler/image_source.hpp"

namespace bigtrain::tiler {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

// Opens the file and reads every level in row bands, as the tiler would (bounded,
// so a level the reader wrongly accepted at a huge size cannot stall the test).
void open_and_read_everything(const std::string& path) {
  auto source = open_image(path);
  const ImageInfo& info = source->info();
  for (int level = 0; level < static_cast<int>(info.levels.size()); ++level) {
    const int64_t width = std::min<int64_t>(info.levels[level].width, 4096);
    const int64_t height = std::min<int64_t>(info.levels[level].height, 4096);
    for (int64_t y = 0; y < height; y += 64) {
      const cv::Mat band = source->read_region(level, 0, y, width, std::min<int64_t>(64, height - y));
      ASSERT_EQ(band.cols, width);
      ASSERT_EQ(band.type(), info.cv_type());
    }
  }
}

TEST(BrokenImages, EveryFileGivesAnErrorNamingIt) {
  const auto files = files_in(fs::path(BIGTRAIN_SOURCE_DIR) / "tests/data/broken_images");
  // make_broken_images.py writes 30 (some flips dropped); far fewer means a lost corpus.
  ASSERT_GE(files.size(), 20u);
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.filename().string());
    try {
      open_and_read_everything(file.string());
      ADD_FAILURE() << file << " was read without an error";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(file.string()), std::string::npos) << "message: " << error.what();
    }
  }
}

TEST(BrokenImages, EveryFuzzSeedReadsCleanly) {
  const auto files = files_in(fs::path(BIGTRAIN_SOURCE_DIR) / "tests/fuzz/corpus/tiff");
  ASSERT_GE(files.size(), 8u);
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.filename().string());
    EXPECT_NO_THROW(open_and_read_everything(file.string()));
  }
}

}  // namespace
}  // namespace bigtrain::tiler
