// Issue 9: images that cannot be read (tests/data/broken_images) fail the dataset
// before training, naming the manifest line and the reason; with
// data.on_bad_image: skip they are left out, each listed with its line and reason.
// A wrong label is a manifest mistake and an error either way.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "pipeline/data/dataset.hpp"
#include "pipeline/data/demo_data.hpp"
#include "tests/support/demo_dataset.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

const std::string kBroken = BIGTRAIN_SOURCE_DIR "/tests/data/broken_images";

class HardeningDatasetTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = testing::fresh_scratch_dir("bigtrain_hardening_dataset_test");
    testing::make_test_demo_data({.out = (root_ / "data").string(), .size = 96, .classes = {0, 1},
                                  .train = 4, .val = 0, .test = 0,
                                  .label_digits = 1, .other_digits = 0, .block_size = 32});
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  // The demo manifest (4 readable images) with `extra` lines appended.
  static std::string manifest(const std::string& name, const std::string& extra) {
    std::ifstream in(root_ / "data" / "train.csv");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const fs::path path = root_ / "data" / name;
    std::ofstream(path) << text << extra;
    return path.string();
  }
  static std::string error_of(const DataConfig& config) {
    try {
      load_dataset(config, 0, ImageCheck::header);
    } catch (const Error& error) {
      return error.what();
    }
    return "(no error)";
  }

  static fs::path root_;
};
fs::path HardeningDatasetTest::root_;

TEST_F(HardeningDatasetTest, UnreadableImagesFailOrAreSkippedAndListed) {
  DataConfig config;
  config.val_fraction = 0;
  // Lines 6-9 (line 1 is the header): three images whose header cannot be read,
  // and one that is missing.
  config.train = manifest("bad.csv", fmt::format("{0}/not-a-tiff.tif,0\n{0}/truncated-header.tif,1\n{0}/empty.tif,1\n"
                                                 "missing.tif,0\n",
                                                 kBroken));
  const std::string message = error_of(config);
  EXPECT_NE(message.find("bad.csv:6"), std::string::npos) << message;
  EXPECT_NE(message.find("not-a-tiff.tif"), std::string::npos) << message;
  EXPECT_NE(message.find("on_bad_image"), std::string::npos) << message;

  // Existence alone (the default check) does not open images.
  EXPECT_EQ(load_dataset(
                [&] {
                  DataConfig no_missing = config;
                  no_missing.train = manifest("bad_but_present.csv", fmt::format("{}/not-a-tiff.tif,0\n", kBroken));
                  return no_missing;
                }(),
                0)
                .train.size(),
            5u);

  config.on_bad_image = OnBadImage::skip;
  const Dataset dataset = load_dataset(config, 0, ImageCheck::header);
  EXPECT_EQ(dataset.train.size(), 4u);
  ASSERT_EQ(dataset.skipped.size(), 4u);
  const std::vector<std::string> lines = {"bad.csv:6", "bad.csv:7", "bad.csv:8", "bad.csv:9"};
  const std::vector<std::string> files = {"not-a-tiff.tif", "truncated-header.tif", "empty.tif", "missing.tif"};
  for (std::size_t i = 0; i < lines.size(); ++i) {
    EXPECT_NE(dataset.skipped[i].origin.find(lines[i]), std::string::npos) << dataset.skipped[i].origin;
    EXPECT_NE(dataset.skipped[i].reason.find(files[i]), std::string::npos) << dataset.skipped[i].reason;
  }
  for (const Sample& sample : dataset.train) EXPECT_EQ(sample.path.find(kBroken), std::string::npos) << sample.path;
}

TEST_F(HardeningDatasetTest, WrongLabelsAreErrorsEvenWhenSkipping) {
  DataConfig config;
  config.val_fraction = 0;
  config.on_bad_image = OnBadImage::skip;
  // With data.classes given, a training label outside them names no class (without
  // it, the training labels are the classes).
  config.classes = {"0", "1"};
  config.train = manifest("unknown.csv", "0/0.tif,zebra\n");
  std::string message = error_of(config);
  EXPECT_NE(message.find("unknown.csv:6"), std::string::npos) << message;
  EXPECT_NE(message.find("'zebra'"), std::string::npos) << message;

  config.train = manifest("no_label.csv", "0/0.tif,\n");
  message = error_of(config);
  EXPECT_NE(message.find("no_label.csv:6"), std::string::npos) << message;
  EXPECT_NE(message.find("label"), std::string::npos) << message;

  // A label only the validation manifest uses is no class of the run either.
  config.classes.clear();
  config.train = manifest("train_ok.csv", "");
  config.val = manifest("val_unknown.csv", "0/0.tif,7\n");
  message = error_of(config);
  EXPECT_NE(message.find("val_unknown.csv:6"), std::string::npos) << message;
}

}  // namespace
}  // namespace bigtrain
