// The tile stream on real tiled TIFFs: batches arrive in schedule order with the
// right tiles, pass 2 sees exactly pass 1's pixels (augmentation included), results
// do not depend on the number of threads or on planning ahead, and failures name the
// image (a failed plan ahead only when the stream reaches it).
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "kernels/core/error.hpp"
#include "pipeline/data/tile_stream.hpp"
#include "tiler/tiff_writer.hpp"
#include "tiler/tile_reader.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

class TileStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("bigtrain_stream_{}", ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    for (int i = 0; i < 3; ++i) {
      const std::string path = (dir_ / fmt::format("{}.tif", i)).string();
      tiler::TiffWriteOptions options;
      options.width = 100 + 20 * i;
      options.height = 90;
      options.channels = 1;
      options.block_size = 32;
      tiler::write_tiff(path, options, [i](int, const cv::Rect& rect, cv::Mat& pixels) {
        for (int y = 0; y < rect.height; ++y)
          for (int x = 0; x < rect.width; ++x)
            pixels.at<std::uint8_t>(y, x) = static_cast<std::uint8_t>((rect.x + x + 3 * (rect.y + y) + 50 * i) % 251);
      });
      paths_.push_back(path);
    }
    config_.tile = 32;
    config_.overlap = 8;
    config_.border = tiler::BorderPolicy::pad;
  }
  void TearDown() override { fs::remove_all(dir_); }

  Preprocessing preprocessing(bool augment) const {
    Preprocessing p;
    p.channels = 1;
    p.mean = {0.5f};
    p.std = {0.25f};
    p.augment = augment;
    p.augmentation = {true, true, 0.1, 0.2, 0.05};
    return p;
  }
  TileStream::Planner planner() const {
    return [this](std::size_t image) { return image_tiling(paths_.at(image), config_, true, 1, 100 + image); };
  }

  fs::path dir_;
  std::vector<std::string> paths_;
  TilerConfig config_;
};

TEST_F(TileStreamTest, BatchesArriveInOrderWithTheRightPixels) {
  TileStream stream({.tile_batch = 4, .tiles_in_flight = 8, .threads = 3}, preprocessing(false));
  const std::vector<StreamJob> schedule = {{0, 1}, {0, 2}, {1, 1}, {1, 2}, {2, 0}};
  std::vector<TileBatch> seen;
  StreamStats stats = stream.run(schedule, planner(), [&](const TileBatch& batch) { seen.push_back(batch); });

  std::size_t expected_job = 0;
  std::int64_t expected_first = 0, tiles = 0;
  for (const auto& batch : seen) {
    if (batch.job != expected_job) {
      EXPECT_EQ(batch.job, expected_job + 1);
      EXPECT_EQ(batch.first_tile, 0);
      expected_job = batch.job;
      expected_first = 0;
    }
    EXPECT_EQ(batch.image, schedule[batch.job].image);
    EXPECT_EQ(batch.pass, schedule[batch.job].pass);
    EXPECT_EQ(batch.first_tile, expected_first);
    const auto count = static_cast<std::int64_t>(batch.plan->tiles.size());
    EXPECT_EQ(batch.pixels.dim(0), std::min<std::int64_t>(4, count - batch.first_tile));
    EXPECT_EQ(batch.last_of_job, batch.first_tile + batch.pixels.dim(0) == count);
    expected_first += batch.pixels.dim(0);
    tiles += batch.pixels.dim(0);
    // Each tile equals a direct read and preprocessing of its rectangle.
    for (std::int64_t k = 0; k < batch.pixels.dim(0); ++k) {
      const std::int64_t tile = batch.first_tile + k;
      const cv::Mat pixels = tiler::read_tile(*batch.plan->source, batch.plan->sampling,
                                              batch.plan->tiles[static_cast<std::size_t>(tile)]);
      std::vector<float> expected(32 * 32);
      preprocess_tile(pixels, preprocessing(false), 0, expected.data());
      EXPECT_EQ(std::memcmp(expected.data(), batch.pixels.f32() + k * 32 * 32, expected.size() * sizeof(float)), 0)
          << "image " << batch.image << " tile " << tile;
    }
  }
  EXPECT_EQ(expected_job, schedule.size() - 1);
  EXPECT_EQ(stats.tiles, tiles);
  // 100x90 with tile 32, overlap 8 (stride 24), pad: 4 columns x 4 rows.
  EXPECT_EQ(seen.front().plan->tiles.size(), 16u);
  EXPECT_GE(stats.wait_seconds, 0.0);
  EXPECT_LE(stats.wait_seconds + stats.compute_seconds, stats.seconds * 1.01 + 1e-3);
}

TEST_F(TileStreamTest, PassTwoRecomputesPassOneExactlyWhateverTheThreads) {
  auto run = [&](int threads) {
    TileStream stream({.tile_batch = 3, .tiles_in_flight = 6, .threads = threads}, preprocessing(true));
    std::vector<std::vector<float>> pass1, pass2;
    stream.run({{0, 1}, {0, 2}, {1, 1}, {1, 2}}, planner(), [&](const TileBatch& batch) {
      (batch.pass == 1 ? pass1 : pass2).push_back(batch.pixels.to_vector());
    });
    EXPECT_EQ(pass1, pass2) << "pass 2 must see pass 1's augmented pixels";
    return pass1;
  };
  const auto one = run(1), four = run(4);
  EXPECT_EQ(one, four);
  // Augmentation did something: the same tiles without it differ.
  TileStream plain({.tile_batch = 3, .threads = 2}, preprocessing(false));
  std::vector<std::vector<float>> unaugmented;
  plain.run({{0, 1}, {1, 1}}, planner(), [&](const TileBatch& batch) { unaugmented.push_back(batch.pixels.to_vector()); });
  EXPECT_NE(unaugmented, one);
}

TEST_F(TileStreamTest, TilesInFlightStayBounded) {
  TileStream stream({.tile_batch = 2, .tiles_in_flight = 5, .threads = 4}, preprocessing(false));
  std::int64_t consumed = 0;
  // A slow consumer: reads pile up behind it and must stop at the limit.
  const StreamStats stats = stream.run({{0, 1}, {1, 1}, {2, 1}}, planner(), [&](const TileBatch& batch) {
    consumed += batch.pixels.dim(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  });
  EXPECT_EQ(stream.tiles_in_flight(), 5);
  EXPECT_EQ(consumed, stats.tiles);
  EXPECT_LE(stats.most_tiles_in_flight, 5);
  EXPECT_GE(stats.most_tiles_in_flight, 2) << "the reads ran ahead of the consumer";
}

TEST_F(TileStreamTest, FailuresNameTheImage) {
  TileStream stream({.tile_batch = 4}, preprocessing(false));
  paths_[1] = (dir_ / "missing.tif").string();
  try {
    stream.run({{0, 1}, {1, 1}}, planner(), [](const TileBatch&) {});
    FAIL() << "expected an Error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("missing.tif"), std::string::npos) << error.what();
  }
  std::int64_t calls = 0;
  try {
    stream.run({{0, 1}}, planner(), [&](const TileBatch&) {
      if (++calls == 2) throw Error("device step failed");
    });
    FAIL() << "expected an Error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("device step failed"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("0.tif"), std::string::npos) << error.what();
  }
  EXPECT_EQ(calls, 2) << "the stream stops at the first failure";
}

TEST_F(TileStreamTest, PlanningAheadOverlapsStreamingAndChangesNothing) {
  const std::vector<StreamJob> schedule = {{0, 1}, {0, 2}, {1, 1}, {1, 2}, {2, 1}, {2, 2}};
  auto run = [&](int plan_ahead, std::vector<std::int64_t>* consumed_when_planned) {
    TileStream stream({.tile_batch = 3, .tiles_in_flight = 6, .threads = 2, .plan_ahead = plan_ahead},
                      preprocessing(true));
    std::atomic<std::int64_t> consumed{0};
    std::mutex mutex;
    std::map<std::size_t, int> calls;
    const TileStream::Planner plan = planner();
    std::vector<std::vector<float>> batches;
    stream.run(
        schedule,
        [&](std::size_t image) {
          {
            std::lock_guard lock(mutex);
            ++calls[image];
            if (consumed_when_planned) (*consumed_when_planned)[image] = consumed.load();
          }
          return plan(image);
        },
        [&](const TileBatch& batch) {
          batches.push_back(batch.pixels.to_vector());
          // A slow device step, so planning ahead has time to happen before it ends.
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          ++consumed;
        });
    for (std::size_t image = 0; image < 3; ++image) EXPECT_EQ(calls[image], 1) << "image " << image;
    return batches;
  };
  std::vector<std::int64_t> consumed_when_planned(3, -1);
  const auto serial = run(0, nullptr), ahead = run(2, &consumed_when_planned);
  EXPECT_EQ(serial, ahead) << "planning ahead must not change a single batch";
  // Image 0 has 16 tiles, 6 batches a pass. Planned when the stream reaches them,
  // images 1 and 2 would see at least 8 and 16 batches consumed (all of image 0's 32
  // tiles but the 6 in flight); planned ahead, both start during image 0's pass 1.
  EXPECT_LT(consumed_when_planned[1], 6);
  EXPECT_LT(consumed_when_planned[2], 6);
}

TEST_F(TileStreamTest, APlannerErrorAheadSurfacesWhenTheStreamReachesTheImage) {
  paths_[2] = (dir_ / "missing.tif").string();
  for (int threads : {1, 3}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    TileStream stream({.tile_batch = 4, .tiles_in_flight = 8, .threads = threads, .plan_ahead = 2},
                      preprocessing(false));
    std::set<std::size_t> finished;
    try {
      stream.run({{0, 1}, {1, 1}, {2, 1}}, planner(), [&](const TileBatch& batch) {
        if (batch.last_of_job) finished.insert(batch.image);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      });
      FAIL() << "expected an Error";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find("missing.tif"), std::string::npos) << error.what();
    }
    // Image 2's planner failed while image 0 streamed, but the failure stopped the
    // stream only once it reached image 2 (as a plan made then would): by then all of
    // image 0 had been consumed (16 tiles; reaching image 2 leaves at most 8 of images
    // 0 and 1's 36 tiles unconsumed). Image 1's in-flight tiles are dropped, as before.
    EXPECT_EQ(finished.count(0), 1u);
    EXPECT_EQ(finished.count(2), 0u);
  }
}

TEST_F(TileStreamTest, NegativePlanAheadIsRefused) {
  EXPECT_THROW(TileStream({.tile_batch = 4, .plan_ahead = -1}, preprocessing(false)), Error);
}


// Pass 2 under a memory budget: the batches last first, the kept ones not read; the
// batches are pass 1's, pixel for pixel. A job left with nothing emits nothing.
TEST_F(TileStreamTest, ReversedJobsSkipTheirFirstBatchesAndRepeatPassOnesBatches) {
  TileStream stream({.tile_batch = 3, .tiles_in_flight = 6, .threads = 2}, preprocessing(true));
  std::vector<StreamJob> schedule = {{0, 1}, {0, 2}, {1, 2}, {2, 2}};
  schedule[1].reverse_batches = schedule[2].reverse_batches = schedule[3].reverse_batches = true;
  schedule[1].skip_batches = 2;
  schedule[3].skip_batches = 1000;
  std::vector<TileBatch> seen;
  stream.run(schedule, planner(), [&](const TileBatch& batch) { seen.push_back(batch); });

  std::map<std::size_t, std::vector<std::int64_t>> firsts;
  std::map<std::size_t, std::vector<bool>> last;
  std::map<std::int64_t, Tensor> pass1;
  for (const auto& batch : seen) {
    firsts[batch.job].push_back(batch.first_tile);
    last[batch.job].push_back(batch.last_of_job);
    if (batch.job >= 2) continue;
    EXPECT_EQ(batch.pixels.dim(0), std::min<std::int64_t>(3, 16 - batch.first_tile)) << "image 0 has 16 tiles";
    if (batch.job == 0) pass1[batch.first_tile] = batch.pixels;
    if (batch.job == 1) {
      ASSERT_TRUE(pass1.count(batch.first_tile));
      EXPECT_EQ(std::memcmp(pass1[batch.first_tile].f32(), batch.pixels.f32(), batch.pixels.nbytes()), 0)
          << "tiles from " << batch.first_tile << " as pass 1 saw them";
    }
  }
  EXPECT_EQ(firsts[0], (std::vector<std::int64_t>{0, 3, 6, 9, 12, 15}));
  EXPECT_EQ(firsts[1], (std::vector<std::int64_t>{15, 12, 9, 6})) << "two batches kept, the rest last first";
  EXPECT_EQ(last[1], (std::vector<bool>{false, false, false, true}));
  const auto image1_tiles = static_cast<std::int64_t>(seen.back().plan->tiles.size());
  std::vector<std::int64_t> expected;
  for (std::int64_t first = ((image1_tiles - 1) / 3) * 3; first >= 0; first -= 3) expected.push_back(first);
  EXPECT_EQ(firsts[2], expected);
  EXPECT_TRUE(seen.back().last_of_job);
  EXPECT_EQ(seen.back().first_tile, 0);
  EXPECT_EQ(firsts.count(3), 0u) << "every batch of image 2 kept: nothing to read";
}

}  // namespace
}  // namespace bigtrain
