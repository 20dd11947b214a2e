// The demo dataset generator on the cached real MNIST digits.
#include <gtest/gtest.h>
#include <string>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include <fmt/format.h>
#include <opencv2/imgproc.hpp>

#include "kernels/core/error.hpp"
#include "pipeline/data/dataset.hpp"
#include "pipeline/data/demo_data.hpp"
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
  options.block_size = 64;
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

cv::Mat read_pixels(const std::string& path) {
  auto source = tiler::open_image(path);
  return source->read_region(0, 0, 0, source->info().width(), source->info().height());
}

// Every MNIST digit resized as the generator resizes it, by its pixels: looking a
// crop up says which digit class (if any) it shows, exactly.
std::map<std::string, int> resized_mnist(int digit_size) {
  std::map<std::string, int> by_pixels;
  for (std::int64_t i = 0; i < mnist().count; ++i) {
    const cv::Mat digit(28, 28, CV_8UC1, const_cast<std::uint8_t*>(mnist().image(i)));
    cv::Mat big;
    cv::resize(digit, big, cv::Size(), digit_size / 28.0, digit_size / 28.0, cv::INTER_LINEAR);
    by_pixels[std::string(big.datastart, big.dataend)] = mnist().labels[static_cast<std::size_t>(i)];
  }
  return by_pixels;
}

// The objects file agrees with the manifest (the label's value three times, other
// values fewer times) and with the pixels: on a black background every object's box
// holds exactly resized MNIST digits of the value it names (clutter never covers one).
void expect_objects_match_labels_and_pixels(const DemoDataOptions& options) {
  make_demo_data(options, mnist());
  const auto lookup = resized_mnist(options.digit_size);
  for (const char* split : {"train", "test"}) {
    const fs::path out(options.out);
    const auto entries = read_split((out / fmt::format("{}.csv", split)).string());
    const auto objects = read_demo_objects((out / fmt::format("{}.objects.csv", split)).string());
    ASSERT_EQ(objects.size(), entries.size()) << split;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const auto& [path, boxes] = objects[i];
      EXPECT_EQ((out / path).string(), entries[i].path);
      const int label = std::stoi(entries[i].label);
      EXPECT_EQ(entries[i].label.size(), static_cast<std::size_t>(options.number_digits)) << "zero-padded";
      std::map<int, int> shown;
      int fragments = 0;
      const cv::Mat pixels = read_pixels(entries[i].path);
      for (const DemoObject& object : boxes) {
        if (object.role == "fragment") {
          ++fragments;
          continue;
        }
        ++shown[object.value];
        EXPECT_EQ(object.role == "label", object.value == label) << path;
        ASSERT_EQ(object.width, options.digit_size * options.number_digits);
        for (int k = 0; k < options.number_digits; ++k) {
          const cv::Mat crop =
              pixels(cv::Rect(object.x + k * options.digit_size, object.y, options.digit_size, options.digit_size)).clone();
          const auto found = lookup.find(std::string(crop.datastart, crop.dataend));
          ASSERT_NE(found, lookup.end()) << path << ": no MNIST digit at " << object.x << "," << object.y;
          const int digit = options.number_digits == 1 ? object.value : (k == 0 ? object.value / 10 : object.value % 10);
          EXPECT_EQ(found->second, digit) << path;
        }
      }
      EXPECT_EQ(fragments, options.fragments);
      EXPECT_EQ(shown[label], options.label_digits) << path;
      for (const auto& [value, count] : shown)
        if (value != label) EXPECT_LT(count, options.label_digits) << path;
    }
  }
}

TEST(DemoData, SeedScaleObjectsMatchLabelsAndPixels) {
  const fs::path dir = testing::fresh_scratch_dir("bigtrain_demo_objects_test");
  expect_objects_match_labels_and_pixels({.out = (dir / "digits").string(),
                                          .size = 640,
                                          .classes = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
                                          .train = 10,
                                          .val = 0,
                                          .test = 4,
                                          .clutter_lines = 0,
                                          .block_size = 128,
                                          .seed = 3,
                                          .digit_size = 56,
                                          .strokes = 12,
                                          .fragments = 12});
  // The 50-class variant: two-digit numbers, the other objects other classes.
  expect_objects_match_labels_and_pixels({.out = (dir / "numbers").string(),
                                          .size = 720,
                                          .classes = {7, 12, 34, 49},
                                          .train = 8,
                                          .val = 0,
                                          .test = 4,
                                          .clutter_lines = 0,
                                          .block_size = 128,
                                          .seed = 4,
                                          .digit_size = 56,
                                          .number_digits = 2,
                                          .strokes = 8,
                                          .fragments = 8});
  fs::remove_all(dir);
}

// The textured background defeats a global brightness threshold: one that keeps
// most digit strokes keeps much of the background. The canvas is the black one's,
// ink for ink (the background is drawn after everything else).
TEST(DemoData, TexturedBackgroundDefeatsAGlobalThresholdAndIsDeterministic) {
  const fs::path dir = testing::fresh_scratch_dir("bigtrain_demo_textured_test");
  DemoDataOptions options{.out = (dir / "black").string(), .size = 800, .classes = {3, 8}, .train = 2, .val = 0,
                          .test = 0, .clutter_lines = 0, .block_size = 128, .seed = 9, .digit_size = 56,
                          .strokes = 10, .fragments = 10};
  make_demo_data(options, mnist());
  options.out = (dir / "textured").string();
  options.background = "textured";
  make_demo_data(options, mnist());
  for (const char* image : {"00000.tif", "00001.tif"}) {
    const cv::Mat ink = read_pixels((dir / "black" / "train" / image).string());
    const cv::Mat textured = read_pixels((dir / "textured" / "train" / image).string());
    std::vector<std::uint8_t> background, strokes;
    for (int y = 0; y < ink.rows; ++y)
      for (int x = 0; x < ink.cols; ++x) {
        if (ink.at<std::uint8_t>(y, x) == 0) background.push_back(textured.at<std::uint8_t>(y, x));
        if (ink.at<std::uint8_t>(y, x) > 200) strokes.push_back(textured.at<std::uint8_t>(y, x));
      }
    ASSERT_GT(strokes.size(), 1000u);
    std::sort(background.begin(), background.end());
    std::sort(strokes.begin(), strokes.end());
    // A global threshold low enough to keep 90% of the digits' stroke pixels keeps
    // more than 10% of the background too: the illumination, not the ink, decides.
    const std::uint8_t keeps_most_ink = strokes[strokes.size() / 10];
    const auto background_kept = static_cast<double>(background.end() - std::lower_bound(background.begin(), background.end(), keeps_most_ink)) /
                                 static_cast<double>(background.size());
    EXPECT_GT(background_kept, 0.10) << image << ": threshold " << int{keeps_most_ink};
    // Not flat either: the darkest and brightest background differ by the gradient.
    EXPECT_GT(background[background.size() * 99 / 100] - background[background.size() / 100], 60) << image;
  }
  EXPECT_EQ(read_demo_objects((dir / "black" / "train.objects.csv").string()).size(), 2u);
  std::ifstream a(dir / "black" / "train.objects.csv"), b(dir / "textured" / "train.objects.csv");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(a), {}), std::string(std::istreambuf_iterator<char>(b), {}))
      << "the background changes no object";
  options.out = (dir / "again").string();
  make_demo_data(options, mnist());
  const cv::Mat first = read_pixels((dir / "textured" / "train" / "00001.tif").string());
  const cv::Mat again = read_pixels((dir / "again" / "train" / "00001.tif").string());
  EXPECT_EQ(cv::countNonZero(first != again), 0) << "same seed, same pixels";
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
  options.number_digits = 2;
  options.classes = {3, 100};
  EXPECT_THROW(make_demo_data(options, mnist()), Error);
  options.classes = {3, 12};
  options.background = "plaid";
  EXPECT_THROW(make_demo_data(options, mnist()), Error);
  std::ofstream(dir / "bad.objects.csv") << "path,role,value,x,y,width,height\ntrain/0.tif,label,3,1,2,0,5\n";
  try {
    read_demo_objects((dir / "bad.objects.csv").string());
    FAIL() << "expected an Error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("bad.objects.csv:2"), std::string::npos) << error.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace bigtrain
