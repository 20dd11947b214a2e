// Tile grids for each border policy: positions, coverage and edge cases.
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "tiler/tile_grid.hpp"
#include "tiler_test_support.hpp"

namespace bigtrain::tiler {
namespace {

std::vector<int> column_starts(const TileGrid& grid) {
  std::vector<int> xs;
  for (const Tile& t : grid.tiles())
    if (t.row == 0) xs.push_back(t.rect.x);
  return xs;
}

TEST(TileGrid, PadShiftAndDropWithOverlap) {
  // 1000 px, tile 256, overlap 56 -> stride 200.
  const TileGrid pad(1000, 700, 256, 56, BorderPolicy::pad);
  EXPECT_EQ(column_starts(pad), (std::vector<int>{0, 200, 400, 600, 800}));
  EXPECT_EQ(pad.rows(), 4);  // 0, 200, 400, 600 (600 + 256 >= 700)
  EXPECT_EQ(pad.tiles().size(), 20u);
  const TileGrid shift(1000, 700, 256, 56, BorderPolicy::shift);
  EXPECT_EQ(column_starts(shift), (std::vector<int>{0, 200, 400, 600, 744}));
  EXPECT_EQ(shift.tiles().back().rect, cv::Rect(744, 444, 256, 256));
  const TileGrid drop(1000, 700, 256, 56, BorderPolicy::drop);
  EXPECT_EQ(column_starts(drop), (std::vector<int>{0, 200, 400, 600}));
  EXPECT_EQ(drop.rows(), 3);  // 0, 200, 400 (600 + 256 > 700)
  EXPECT_EQ(drop.dropped_at_border(), 20 - 12);
  EXPECT_EQ(pad.dropped_at_border(), 0);
}

TEST(TileGrid, ExactFitIsTheSameForEveryPolicy) {
  for (BorderPolicy border : {BorderPolicy::pad, BorderPolicy::shift, BorderPolicy::drop}) {
    const TileGrid grid(512, 768, 256, 0, border);
    EXPECT_EQ(grid.cols(), 2) << border_policy_name(border);
    EXPECT_EQ(grid.rows(), 3) << border_policy_name(border);
  }
}

TEST(TileGrid, ImageSmallerThanOneTile) {
  EXPECT_EQ(TileGrid(100, 80, 256, 0, BorderPolicy::pad).tiles().size(), 1u);
  const TileGrid shift(100, 80, 256, 0, BorderPolicy::shift);
  ASSERT_EQ(shift.tiles().size(), 1u);
  EXPECT_EQ(shift.tiles()[0].rect, cv::Rect(0, 0, 256, 256));  // padded: nothing to shift into
  EXPECT_EQ(TileGrid(100, 80, 256, 0, BorderPolicy::drop).tiles().size(), 0u);
}

TEST(TileGrid, RowsAndColumnsIndexTheRects) {
  const TileGrid grid(900, 500, 128, 32, BorderPolicy::shift);
  for (const Tile& t : grid.tiles()) {
    EXPECT_EQ(t.rect.x, std::min(t.col * 96, 900 - 128));
    EXPECT_EQ(t.rect.y, std::min(t.row * 96, 500 - 128));
  }
  EXPECT_EQ(grid.tiles().size(), static_cast<size_t>(grid.rows() * grid.cols()));
}

TEST(TileGrid, InvalidParametersAreErrors) {
  testing::expect_error([] { TileGrid(100, 100, 64, 64, BorderPolicy::pad); }, {"overlap"});
  testing::expect_error([] { TileGrid(100, 100, 0, 0, BorderPolicy::pad); }, {"tile size"});
  testing::expect_error([] { TileGrid(0, 100, 64, 0, BorderPolicy::pad); }, {"image size"});
  testing::expect_error([] { TileGrid(100000, 100000, 2, 1, BorderPolicy::pad); }, {"larger tile"});
}

TEST(TileGrid, PropertiesHoldForRandomGrids) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 60; ++trial) {
    const int W = 1 + rng() % 700, H = 1 + rng() % 700, T = 16 + rng() % 200, O = rng() % (T / 2 + 1);
    const cv::Rect image(0, 0, W, H);
    for (BorderPolicy border : {BorderPolicy::pad, BorderPolicy::shift, BorderPolicy::drop}) {
      SCOPED_TRACE(::testing::Message() << W << "x" << H << " T=" << T << " O=" << O << " " << border_policy_name(border));
      const TileGrid grid(W, H, T, O, border);
      cv::Mat covered = cv::Mat::zeros(H, W, CV_8U);
      std::set<std::pair<int, int>> seen;
      for (const Tile& t : grid.tiles()) {
        ASSERT_EQ(t.rect.size(), cv::Size(T, T));
        ASSERT_TRUE(seen.insert({t.row, t.col}).second);
        if (border == BorderPolicy::drop || (border == BorderPolicy::shift && W >= T && H >= T))
          ASSERT_EQ(t.rect & image, t.rect) << "tile outside the image";
        covered(t.rect & image).setTo(1);
        if (t.col > 0) {
          // Neighbours overlap by at least O (shift only makes the last overlap more).
          const int previous = grid.tiles()[&t - &grid.tiles()[0] - 1].rect.x;
          ASSERT_GE(previous + T - t.rect.x, O);
          ASSERT_GT(t.rect.x, previous);
        }
      }
      if (border != BorderPolicy::drop) EXPECT_EQ(cv::countNonZero(covered), W * H) << "image not covered";
    }
  }
}

}  // namespace
}  // namespace bigtrain::tiler
