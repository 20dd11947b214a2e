// Heatmaps: overlapping tiles average, files have the sizes the image implies, and
// the colours are those of the tiles' values.
#include <gtest/gtest.h>
#include <string>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include <opencv2/imgcodecs.hpp>

#include "pipeline/infer/heatmap.hpp"
#include "tiler/background.hpp"
#include "tiler/image_source.hpp"
#include "tiler/tiff_writer.hpp"
#include "tiler/tile_reader.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

TEST(HeatmapTest, OverlapsAverageAndUncoveredCellsAreNaN) {
  // Two 4x4 tiles overlapping in a 2x4 band of an 8x4 raster (cells of 1 pixel),
  // one tile 2 px right.
  const std::vector<cv::Rect> rects = {{0, 0, 4, 4}, {2, 0, 4, 4}};
  const cv::Mat mean = average_tile_values(rects, {1.0f, 3.0f}, 8, 4, 1.0, 1.0);
  EXPECT_FLOAT_EQ(mean.at<float>(0, 0), 1.0f);
  EXPECT_FLOAT_EQ(mean.at<float>(3, 1), 1.0f);
  EXPECT_FLOAT_EQ(mean.at<float>(0, 2), 2.0f);
  EXPECT_FLOAT_EQ(mean.at<float>(3, 3), 2.0f);
  EXPECT_FLOAT_EQ(mean.at<float>(1, 5), 3.0f);
  EXPECT_TRUE(std::isnan(mean.at<float>(0, 6)));
  // Coarser cells: 2 px per cell.
  const cv::Mat coarse = average_tile_values(rects, {1.0f, 3.0f}, 4, 2, 2.0, 2.0);
  EXPECT_FLOAT_EQ(coarse.at<float>(0, 0), 1.0f);
  EXPECT_FLOAT_EQ(coarse.at<float>(1, 1), 2.0f);
  EXPECT_FLOAT_EQ(coarse.at<float>(0, 2), 3.0f);
  EXPECT_TRUE(std::isnan(coarse.at<float>(0, 3)));
}

TEST(HeatmapTest, ColourScaleRunsFromBlueToRed) {
  const cv::Vec3b low = heatmap_colour(0.0f, 0.0f, 1.0f), high = heatmap_colour(1.0f, 0.0f, 1.0f);
  EXPECT_GT(low[2], low[0]);    // RGB: blue end
  EXPECT_GT(high[0], high[2]);  // red end
  EXPECT_EQ(heatmap_colour(5.0f, 0.0f, 1.0f), high);  // clamped
}

class HeatmapFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bigtrain_heatmap_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // A 1000 x 600 grey image, tiles of 200 every 100 px (overlap 100): 9 x 5 tiles.
    image_ = (dir_ / "image.tif").string();
    tiler::TiffWriteOptions write;
    write.width = 1000;
    write.height = 600;
    write.channels = 1;
    write.block_size = 128;
    tiler::write_tiff(image_, write, [](int, const cv::Rect&, cv::Mat& pixels) { pixels.setTo(200); });
    auto plan = std::make_shared<ImageTiling>();
    plan->path = image_;
    plan->source = tiler::open_image(image_);
    plan->sampling = tiler::sampling_at_level(plan->source->info(), 0);
    plan->tile_size = 200;
    prediction_.path = image_;
    prediction_.top_class = 0;
    prediction_.probabilities = {0.7f, 0.3f};
    for (int y = 0; y + 200 <= 600; y += 100)
      for (int x = 0; x + 200 <= 1000; x += 100) {
        plan->tiles.emplace_back(x, y, 200, 200);
        TileResult t;
        t.rect = plan->tiles.back();
        // A score that grows to the right and downwards, so every region differs.
        t.class_scores = {static_cast<float>(x) / 1000.0f + static_cast<float>(y) / 2000.0f, 0.0f};
        t.attention = std::nanf("");
        prediction_.tile_results.push_back(t);
      }
    prediction_.tiles = static_cast<std::int64_t>(plan->tiles.size());
    prediction_.plan = plan;
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
  std::string image_;
  ImagePrediction prediction_;
};

TEST_F(HeatmapFileTest, TiffHasOnePixelPerTileStepWithTheTilesColours) {
  const HeatmapValues values = heatmap_values(prediction_, {"a", "b"}, false);
  ASSERT_EQ(values.values.size(), 45u);
  EXPECT_EQ(values.quantity, "P(a)");
  const std::string out = (dir_ / "heat.tif").string();
  write_heatmap_tiff(out, prediction_, values);
  const auto heat = tiler::open_image(out);
  // Cells of gcd(200, 100) = 100 px: 10 x 6.
  ASSERT_EQ(heat->info().width(), 10);
  ASSERT_EQ(heat->info().height(), 6);
  const cv::Mat pixels = tiler::read_tile(*heat, tiler::sampling_at_level(heat->info(), 0), {0, 0, 10, 6});
  // The top-left cell lies under the first tile alone; cell (1, 1) under four tiles.
  auto score = [&](int x, int y) { return static_cast<float>(x) / 1000.0f + static_cast<float>(y) / 2000.0f; };
  EXPECT_EQ(pixels.at<cv::Vec3b>(0, 0), heatmap_colour(score(0, 0), 0.0f, 1.0f));
  const float four = (score(0, 0) + score(100, 0) + score(0, 100) + score(100, 100)) / 4.0f;
  EXPECT_EQ(pixels.at<cv::Vec3b>(1, 1), heatmap_colour(four, 0.0f, 1.0f));
  EXPECT_EQ(pixels.at<cv::Vec3b>(5, 9), heatmap_colour(score(800, 400), 0.0f, 1.0f));
  EXPECT_NE(pixels.at<cv::Vec3b>(0, 0), pixels.at<cv::Vec3b>(5, 9));
}

TEST_F(HeatmapFileTest, PngIsTheThumbnailPlusALegendColouredByScore) {
  const HeatmapValues values = heatmap_values(prediction_, {"a", "b"}, false);
  const std::string out = (dir_ / "heat.png").string();
  write_heatmap_png(out, prediction_, values, 500);
  const cv::Mat png = cv::imread(out, cv::IMREAD_COLOR);  // BGR
  ASSERT_FALSE(png.empty());
  const tiler::Thumbnail thumbnail = tiler::make_thumbnail(*prediction_.plan->source, 500);
  EXPECT_EQ(png.rows, std::max(thumbnail.pixels.rows, 160));
  EXPECT_GT(png.cols, thumbnail.pixels.cols);  // the legend to the right
  // The blend of grey 200 with the colour of the left (low score) and right (high)
  // corners: the low end is bluer, the high end redder.
  const cv::Vec3b left = png.at<cv::Vec3b>(5, 5), right = png.at<cv::Vec3b>(thumbnail.pixels.rows - 5,
                                                                              thumbnail.pixels.cols - 5);
  EXPECT_GT(static_cast<int>(left[0]) - left[2], 50) << left;
  EXPECT_GT(static_cast<int>(right[2]) - right[0], 50) << right;
  ASSERT_TRUE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp"));
}

TEST(HeatmapPathTest, ManyImagesGetOneFileEach) {
  EXPECT_EQ(heatmap_path_for("out/heat.png", "/data/a.tif", false), "out/heat.png");
  EXPECT_EQ(heatmap_path_for("out/heat.png", "/data/a.tif", true), "out/heat_a.png");
}

}  // namespace
}  // namespace bigtrain
