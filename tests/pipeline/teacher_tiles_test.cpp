// train.teacher: the teacher's highest-scoring tiles map onto the student's tiling by
// their overlap in level-0 pixels, whatever either run's downsample, and the config
// refuses what would make the choice meaningless.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "pipeline/config/config.hpp"
#include "pipeline/train/teacher_tiles.hpp"
#include "tests/support/error_of.hpp"

namespace bigtrain {
namespace {

using testing::error_of;

tiler::Sampling at_downsample(double downsample) {
  tiler::Sampling s;
  s.downsample = downsample;
  return s;
}

// A 3x3 grid of 64-pixel tiles every 64 grid pixels.
std::vector<cv::Rect> grid() {
  std::vector<cv::Rect> tiles;
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 3; ++x) tiles.emplace_back(64 * x, 64 * y, 64, 64);
  return tiles;
}

TEST(MatchTeacherTiles, TakesTheTopScoresInTheStudentsOrder) {
  const std::vector<cv::Rect> tiles = grid();
  std::vector<TeacherTileScore> teacher;
  const float scores[9] = {0.1f, 0.05f, 0.3f, 0.0f, 0.02f, 0.01f, 0.5f, 0.02f, 0.0f};
  for (std::size_t i = 0; i < tiles.size(); ++i) teacher.push_back({tiles[i], scores[i]});
  const auto selected = match_teacher_tiles(teacher, 3, tiles, at_downsample(1.0));
  ASSERT_EQ(selected.size(), 3u);
  EXPECT_EQ(selected[0], tiles[0]);
  EXPECT_EQ(selected[1], tiles[2]);
  EXPECT_EQ(selected[2], tiles[6]);
  EXPECT_EQ(match_teacher_tiles(teacher, 1, tiles, at_downsample(1.0)), std::vector<cv::Rect>{tiles[6]});
  // More than the image has: every tile once.
  EXPECT_EQ(match_teacher_tiles(teacher, 20, tiles, at_downsample(1.0)).size(), tiles.size());
}

TEST(MatchTeacherTiles, EqualScoresGoToTheEarlierTile) {
  const std::vector<cv::Rect> tiles = grid();
  std::vector<TeacherTileScore> teacher;
  for (const cv::Rect& t : tiles) teacher.push_back({t, 0.25f});
  EXPECT_EQ(match_teacher_tiles(teacher, 2, tiles, at_downsample(1.0)), (std::vector<cv::Rect>{tiles[0], tiles[1]}));
}

TEST(MatchTeacherTiles, MapsATeacherAtAnotherResolutionByOverlapInLevelZero) {
  // The student reads at a third of level 0: its tile (64, 64) covers level-0 pixels
  // 192..384. The teacher read at full resolution: a 150-pixel tile at (200, 210)
  // overlaps that student tile most.
  const std::vector<cv::Rect> tiles = grid();
  const std::vector<TeacherTileScore> teacher = {{cv::Rect(200, 210, 150, 150), 0.9f},
                                                 {cv::Rect(0, 0, 100, 100), 0.1f}};
  EXPECT_EQ(match_teacher_tiles(teacher, 1, tiles, at_downsample(3.0)), std::vector<cv::Rect>{tiles[4]});
  // A teacher tile straddling two student tiles goes to the one it covers more.
  const std::vector<TeacherTileScore> straddling = {{cv::Rect(150, 0, 100, 100), 1.0f}};
  EXPECT_EQ(match_teacher_tiles(straddling, 1, tiles, at_downsample(3.0)), std::vector<cv::Rect>{tiles[1]});
}

TEST(MatchTeacherTiles, TwoTeacherTilesOnOneStudentTileCountOnce) {
  const std::vector<cv::Rect> tiles = grid();
  const std::vector<TeacherTileScore> teacher = {{cv::Rect(0, 0, 32, 32), 0.6f}, {cv::Rect(20, 20, 32, 32), 0.4f}};
  EXPECT_EQ(match_teacher_tiles(teacher, 2, tiles, at_downsample(1.0)), std::vector<cv::Rect>{tiles[0]});
}

TEST(MatchTeacherTiles, NoOverlapSelectsNothing) {
  const std::vector<TeacherTileScore> teacher = {{cv::Rect(5000, 5000, 64, 64), 1.0f}};
  EXPECT_TRUE(match_teacher_tiles(teacher, 1, grid(), at_downsample(1.0)).empty());
}

TEST(TeacherConfig, CheckpointIsResolvedBesideTheConfigAndTopIsChecked) {
  const auto dir = std::filesystem::temp_directory_path() / ("teacher_config_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "configs");
  const auto yaml = dir / "configs" / "run.yaml";
  std::ofstream(yaml) << "data: {train: a.csv}\ntrain:\n  teacher: {checkpoint: ../runs/t/best.safetensors, top: 2}\n";
  const Config config = load_config(yaml.string());
  std::filesystem::remove_all(dir);
  EXPECT_EQ(config.train.teacher.checkpoint, (dir / "runs" / "t" / "best.safetensors").string());
  EXPECT_EQ(config.train.teacher.top, 2);
  EXPECT_EQ(parse_config("data: {train: a.csv}\n", "run.yaml").train.teacher.checkpoint, "");
  const std::string zero = error_of([] {
    parse_config("data: {train: a.csv}\ntrain:\n  teacher: {checkpoint: t.safetensors, top: 0}\n", "run.yaml");
  });
  EXPECT_NE(zero.find("top"), std::string::npos) << zero;
  const std::string subset = error_of([] {
    parse_config("data: {train: a.csv}\ntiler: {max_tiles_per_image: 8}\ntrain:\n  teacher: {checkpoint: t.safetensors}\n",
                 "run.yaml");
  });
  EXPECT_NE(subset.find("max_tiles_per_image"), std::string::npos) << subset;
  const std::string resize = error_of([] {
    parse_config("data: {train: a.csv}\ntiler: {mode: resize}\ntrain:\n  teacher: {checkpoint: t.safetensors}\n",
                 "run.yaml");
  });
  EXPECT_NE(resize.find("tiler.mode tiles"), std::string::npos) << resize;
  const std::string typo = error_of([] {
    parse_config("data: {train: a.csv}\ntrain:\n  teacher: {checkpiont: t.safetensors}\n", "run.yaml");
  });
  EXPECT_NE(typo.find("checkpiont"), std::string::npos) << typo;
}

}  // namespace
}  // namespace bigtrain
