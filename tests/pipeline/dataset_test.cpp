#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/error_of.hpp"
#include "kernels/core/error.hpp"
#include "pipeline/data/dataset.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

using testing::error_of;

// A scratch folder with empty image files (existence is all the dataset checks).
class DatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("bigtrain_dataset_{}", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "img");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string touch(const std::string& name) {
    const fs::path path = dir_ / "img" / name;
    fs::create_directories(path.parent_path());
    std::ofstream(path) << "x";
    return path.string();
  }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  fs::path dir_;
};

TEST_F(DatasetTest, ManifestPathsAreRelativeToTheManifestAndClassesSorted) {
  for (int i = 0; i < 4; ++i) touch(fmt::format("{}.tif", i));
  const auto manifest = write("train.csv", "path,label\nimg/0.tif,dog\n# comment\n\nimg/1.tif,cat\n\"img/2.tif\",dog\nimg/3.tif,cat\n");
  DataConfig config;
  config.train = manifest;
  config.val_fraction = 0;
  Dataset d = load_dataset(config, 1);
  EXPECT_EQ(d.classes, (std::vector<std::string>{"cat", "dog"}));
  ASSERT_EQ(d.train.size(), 4u);
  EXPECT_EQ(d.train[0].path, (dir_ / "img" / "0.tif").string());
  EXPECT_EQ(d.train[0].label, 1);
  EXPECT_EQ(d.train[1].label, 0);
  EXPECT_EQ(d.train[1].origin, manifest + ":5");
  EXPECT_TRUE(d.val.empty());
}

TEST_F(DatasetTest, IntegerLabelsSortNumericallyAndIndexConfiguredClasses) {
  for (int i = 0; i < 3; ++i) touch(fmt::format("{}.tif", i));
  DataConfig config;
  config.val_fraction = 0;
  config.train = write("a.csv", "img/0.tif,10\nimg/1.tif,9\nimg/2.tif,10\n");
  EXPECT_EQ(load_dataset(config, 0).classes, (std::vector<std::string>{"9", "10"}));
  config.train = write("b.csv", "img/0.tif,1\nimg/1.tif,0\nimg/2.tif,benign\n");
  config.classes = {"benign", "tumour"};
  Dataset d = load_dataset(config, 0);
  EXPECT_EQ(d.train[0].label, 1);
  EXPECT_EQ(d.train[1].label, 0);
  EXPECT_EQ(d.train[2].label, 0);
}

TEST_F(DatasetTest, BadLinesNameTheManifestLine) {
  touch("0.tif");
  DataConfig config;
  config.val_fraction = 0;
  config.classes = {"a", "b"};
  config.train = write("missing_label.csv", "img/0.tif,a\nimg/0.tif,\n");
  std::string message = error_of([&] { load_dataset(config, 0); });
  EXPECT_NE(message.find("missing_label.csv:2"), std::string::npos) << message;
  EXPECT_NE(message.find("label"), std::string::npos) << message;

  config.train = write("unknown.csv", "img/0.tif,a\nimg/0.tif,c\n");
  message = error_of([&] { load_dataset(config, 0); });
  EXPECT_NE(message.find("unknown.csv:2"), std::string::npos) << message;
  EXPECT_NE(message.find("'c'"), std::string::npos) << message;

  config.train = write("out_of_range.csv", "img/0.tif,2\n");
  EXPECT_NE(error_of([&] { load_dataset(config, 0); }).find("out_of_range.csv:1"), std::string::npos);

  config.train = write("three_fields.csv", "img/0.tif,a,extra\n");
  EXPECT_NE(error_of([&] { load_dataset(config, 0); }).find("three_fields.csv:1"), std::string::npos);

  config.train = write("no_image.csv", "img/0.tif,a\nimg/nope.tif,b\n");
  message = error_of([&] { load_dataset(config, 0); });
  EXPECT_NE(message.find("no_image.csv:2"), std::string::npos) << message;
  config.on_bad_image = OnBadImage::skip;
  Dataset d = load_dataset(config, 0);
  EXPECT_EQ(d.train.size(), 1u);
  ASSERT_EQ(d.skipped.size(), 1u);
  EXPECT_NE(d.skipped[0].origin.find("no_image.csv:2"), std::string::npos);

  config.train = (dir_ / "absent.csv").string();
  EXPECT_NE(error_of([&] { load_dataset(config, 0); }).find("absent.csv"), std::string::npos);
}

TEST_F(DatasetTest, FolderPerClass) {
  touch("root/zebra/1.png");
  touch("root/zebra/0.tif");
  touch("root/ant/a.jpg");
  touch("root/ant/notes.txt");  // not an image
  DataConfig config;
  config.val_fraction = 0;
  config.train = (dir_ / "img" / "root").string();
  Dataset d = load_dataset(config, 0);
  EXPECT_EQ(d.classes, (std::vector<std::string>{"ant", "zebra"}));
  ASSERT_EQ(d.train.size(), 3u);
  EXPECT_EQ(fs::path(d.train[1].path).filename(), "0.tif");
  EXPECT_EQ(d.train[1].label, 1);
}

TEST_F(DatasetTest, ValidationSplitIsStratifiedSeededAndDisjoint) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += fmt::format("{},{}\n", touch(fmt::format("{}.tif", i)), i < 80 ? "a" : "b");
  DataConfig config;
  config.train = write("train.csv", text);
  config.val_fraction = 0.25;
  Dataset d = load_dataset(config, 7);
  EXPECT_EQ(d.class_counts(d.val), (std::vector<std::int64_t>{20, 5}));
  EXPECT_EQ(d.class_counts(d.train), (std::vector<std::int64_t>{60, 15}));
  for (const auto& v : d.val)
    EXPECT_TRUE(std::none_of(d.train.begin(), d.train.end(), [&](const Sample& t) { return t.path == v.path; }));
  Dataset same = load_dataset(config, 7);
  Dataset other = load_dataset(config, 8);
  auto paths = [](const std::vector<Sample>& s) {
    std::vector<std::string> p;
    for (const auto& x : s) p.push_back(x.path);
    return p;
  };
  EXPECT_EQ(paths(same.val), paths(d.val));
  EXPECT_NE(paths(other.val), paths(d.val));
}

TEST_F(DatasetTest, SeparateSplitsUseTheTrainingClasses) {
  for (int i = 0; i < 4; ++i) touch(fmt::format("{}.tif", i));
  DataConfig config;
  config.train = write("train.csv", "img/0.tif,x\nimg/1.tif,y\n");
  config.val = write("val.csv", "img/2.tif,y\n");
  config.test = write("test.csv", "img/3.tif,z\n");
  const std::string message = error_of([&] { load_dataset(config, 0); });
  EXPECT_NE(message.find("test.csv:1"), std::string::npos) << message;
  config.test.clear();
  Dataset d = load_dataset(config, 0);
  ASSERT_EQ(d.val.size(), 1u);
  EXPECT_EQ(d.val[0].label, 1);
  EXPECT_EQ(d.train.size(), 2u);
}

}  // namespace
}  // namespace bigtrain
