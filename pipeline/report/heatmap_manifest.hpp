#pragma once
// RUN_DIR/heatmaps/report_heatmaps.json: which validation images the trainer drew
// heatmaps of (pipeline/train/report_heatmaps.hpp writes them), their true and
// predicted classes and the checkpoint's epoch; report.html captions its heatmaps
// from it. The format lives here, with its reader, so the report reads a file and
// never runs a model.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace bigtrain {

inline constexpr const char* kReportHeatmapsManifest = "report_heatmaps.json";

struct ReportHeatmap {
  std::string file;   // name inside RUN_DIR/heatmaps
  std::string image;  // the validation image's path
  std::string true_class, predicted_class;
  double probability = 0.0;  // of the predicted class
  std::int64_t tiles = 0;
  bool correct = false;
};

struct ReportHeatmapSet {
  std::int64_t epoch = 0;       // of the checkpoint the heatmaps were drawn with
  std::string quantity;         // "attention" or "P(predicted class)"
  std::size_t scanned = 0;      // validation images classified to choose them
  std::size_t validation_images = 0;
  std::vector<ReportHeatmap> heatmaps;
};

std::string report_heatmaps_json(const ReportHeatmapSet& set);
ReportHeatmapSet parse_report_heatmaps_json(const std::string& text, const std::string& source);

}  // namespace bigtrain
