// The demo dataset generator on the cached real MNIST digits.
#include <gtest/gtest.h>
#include <string>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kernels/core/error.hpp"
#include "pipeline/dataset.hpp"
#include "pipeline/demo_data.hpp"
#include "tests/support/demo_dataset.hpp"
#include "tiler/image_source.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

const MnistDigits& mnist() { return testing::cached_mnist(); }

TEST(DemoData, ReadsTheCachedMnist) {
  EXPECT_EQ(mnist().count, 10000);
  std::vector<int> per_class(10, 0);
  for (int label : mnist().labels) ++per_class.at(static_cast<std::size_t>(label));
  for (int count : per_class) EXPECT_GT(count, 800);  // MNIST's classes are roughly balanced
}

TEST(DemoData, WritesTiledTiffsAndManifestsDeterministically) {
  const fs::path dir = testing::fresh_scratch_dir("bigtrain_demo_data_test");
  DemoDataOptions options;
  options.out = (dir / "a").string();
  options.size = 160;
  options.classes = {3, 7};
  options.train = 4;
  options.val = 2;
  options.test = 0;
  options.tile_size = 64;
  options.seed = 5;
  const DemoDataSummary summary = make_demo_data(options, mnist());
  EXPECT_EQ(summary.images, 6);
  ASSERT_EQ(summary.manifests.size(), 2u);
  EXPECT_FALSE(fs::exists(dir / "a" / "test.csv"));

  DataConfig data;
  data.train = (dir / "a" / "train.csv").string();
  data.val = (dir / "a" / "val.csv").string();
  const Dataset dataset = load_dataset(data, 0);
  EXPECT_EQ(dataset.classes, (std::vector<std::string>{"3", "7"}));
  EXPECT_EQ(dataset.class_counts(dataset.train), (std::vector<std::int64_t>{2, 2}));

  auto pixels_of = [](const std::string& path) {
    auto source = tiler::open_image(path);
    EXPECT_EQ(source->info().width(), 160);
    EXPECT_EQ(source->info().channels, 1);
    EXPECT_EQ(source->info().levels[0].layout, tiler::Layout::tiled);
    cv::Mat m = source->read_region(0, 0, 0, 160, 160);
    return std::vector<std::uint8_t>(m.datastart, m.dataend);
  };
  const auto first = pixels_of(dataset.train[0].path);
  // Five digits of ~150 lit pixels each plus clutter: a few hundred to a few thousand lit pixels.
  const auto lit = std::count_if(first.begin(), first.end(), [](std::uint8_t v) { return v > 0; });
  EXPECT_GT(lit, 300);
  EXPECT_LT(lit, 160 * 160 / 4);

  options.out = (dir / "b").string();
  make_demo_data(options, mnist());
  EXPECT_EQ(pixels_of((dir / "b" / "train" / "00000.tif").string()), first) << "same seed, same canvas";
  options.out = (dir / "c").string();
  options.seed = 6;
  make_demo_data(options, mnist());
  EXPECT_NE(pixels_of((dir / "c" / "train" / "00000.tif").string()), first);
  fs::remove_all(dir);
}

TEST(DemoData, BadInputsAreClearErrors) {
  const fs::path dir = fs::temp_directory_path() / ("bigtrain_demo_data_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "mnist-images-idx3-ubyte.gz") << "not gzip, not idx";
  std::ofstream(dir / "mnist-labels-idx1-ubyte.gz") << "nope";
  try {
    load_mnist_folder(dir.string());
    FAIL() << "expected an Error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("mnist-images-idx3-ubyte.gz"), std::string::npos) << error.what();
  }
  DemoDataOptions options;
  options.out = (dir / "out").string();
  options.classes = {3};
  EXPECT_THROW(make_demo_data(options, mnist()), Error);
  options.classes = {3, 12};
  EXPECT_THROW(make_demo_data(options, mnist()), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bigtrain
