#include "pipeline/train/teacher_tiles.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "pipeline/data/image_tiling.hpp"
#include "pipeline/infer/infer.hpp"

namespace bigtrain {
namespace {

cv::Rect level0_rect(const cv::Rect& grid, const tiler::Sampling& sampling) {
  const double d = sampling.downsample;
  const auto x0 = static_cast<int>(std::floor(grid.x * d)), y0 = static_cast<int>(std::floor(grid.y * d));
  const auto x1 = static_cast<int>(std::ceil((grid.x + grid.width) * d));
  const auto y1 = static_cast<int>(std::ceil((grid.y + grid.height) * d));
  return {x0, y0, x1 - x0, y1 - y0};
}

}  // namespace

std::vector<cv::Rect> match_teacher_tiles(std::vector<TeacherTileScore> teacher, std::int64_t top,
                                          const std::vector<cv::Rect>& student_tiles,
                                          const tiler::Sampling& student_sampling) {
  std::stable_sort(teacher.begin(), teacher.end(),
                   [](const TeacherTileScore& a, const TeacherTileScore& b) { return a.score > b.score; });
  if (static_cast<std::int64_t>(teacher.size()) > top) teacher.resize(static_cast<std::size_t>(top));
  std::vector<cv::Rect> student_level0;
  student_level0.reserve(student_tiles.size());
  for (const cv::Rect& tile : student_tiles) student_level0.push_back(level0_rect(tile, student_sampling));
  std::vector<bool> chosen(student_tiles.size(), false);
  for (const TeacherTileScore& t : teacher) {
    std::int64_t best_area = 0;
    std::size_t best = student_tiles.size();
    for (std::size_t i = 0; i < student_level0.size(); ++i) {
      const std::int64_t area = (student_level0[i] & t.level0).area();
      if (area > best_area) best_area = area, best = i;
    }
    if (best < student_tiles.size()) chosen[best] = true;
  }
  std::vector<cv::Rect> selected;
  for (std::size_t i = 0; i < student_tiles.size(); ++i)
    if (chosen[i]) selected.push_back(student_tiles[i]);
  return selected;
}

std::vector<std::vector<cv::Rect>> select_tiles_by_teacher(const Config& config, const std::vector<Sample>& train,
                                                           const std::vector<std::string>& classes, Backend backend) {
  const TeacherConfig& teacher_config = config.train.teacher;
  LoadedCheckpoint teacher = load_checkpoint_for_inference(teacher_config.checkpoint);
  const bool by_attention = teacher.aggregator->kind() == net::AggregatorKind::attention;
  if (!by_attention && teacher.classes != classes)
    throw Error(fmt::format("train.teacher {}: its aggregator has no attention, so tiles are ranked by the probability "
                            "of the image's label, but its classes [{}] are not the data's [{}]",
                            teacher_config.checkpoint, fmt::join(teacher.classes, ", "), fmt::join(classes, ", ")));
  InferenceOptions options;
  options.backend = backend;
  options.tile_results = true;
  options.threads = static_cast<int>(config.device.threads);
  options.memory_phase = "train.teacher's scoring";
  InferenceEngine engine(teacher, options);
  std::vector<InferenceItem> items;
  items.reserve(train.size());
  for (const Sample& sample : train) items.push_back({sample.path, sample.label});

  std::vector<std::vector<cv::Rect>> selected(train.size());
  std::string first_error;
  std::size_t tiles = 0;
  engine.run(items, [&](ImagePrediction&& p) {
    if (!p.ok()) {
      if (first_error.empty()) first_error = p.error;
      return;
    }
    const int label = train[p.index].label;
    std::vector<TeacherTileScore> scores;
    scores.reserve(p.tile_results.size());
    for (const TileResult& tile : p.tile_results)
      scores.push_back({level0_rect(tile.rect, p.plan->sampling),
                        by_attention ? tile.attention : tile.class_scores.at(static_cast<std::size_t>(label))});
    // The student's own tiling (background filter included), as training will read it.
    ImageTiling student;
    try {
      student = image_tiling(p.path, config.tiler, false, 0, 0, config.data.max_value);
    } catch (const std::exception& error) {
      if (first_error.empty()) first_error = error.what();
      return;
    }
    selected[p.index] = match_teacher_tiles(std::move(scores), teacher_config.top, student.tiles, student.sampling);
    // Errors are kept, not thrown: this runs inside the tile stream's graph.
    if (selected[p.index].empty() && first_error.empty())
      first_error = fmt::format("none of the teacher's top tiles of {} overlaps a tile this run keeps (check the two "
                                "runs' tiler settings)",
                                p.path);
    tiles += selected[p.index].size();
  });
  if (!first_error.empty())
    throw Error(fmt::format("train.teacher {}: scoring the training images failed: {}", teacher_config.checkpoint,
                            first_error));
  spdlog::info("train.teacher {}: {} training images scored by {}; {:.2f} tiles an image selected (top {})",
               teacher_config.checkpoint, train.size(), by_attention ? "attention" : "the label's probability",
               train.empty() ? 0.0 : static_cast<double>(tiles) / static_cast<double>(train.size()),
               teacher_config.top);
  return selected;
}

}  // namespace bigtrain
