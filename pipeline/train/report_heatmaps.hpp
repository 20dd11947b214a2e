#pragma once
// Heatmaps of a few validation images for report.html, correct and wrong ones,
// drawn by the trainer each time the validation metric improves (so they always
// show the best checkpoint). The images are classified by `bigtrain infer`'s own
// engine from checkpoints/best.safetensors, so what the page shows is what a user
// would get from that checkpoint.
//
// Written to RUN_DIR/heatmaps/:
//   val_<correct|wrong>_<n>_<image stem>.png  thumbnail heatmaps (pipeline/infer/heatmap.hpp):
//       attention weight per tile (attention aggregator), else each tile's own
//       probability of the predicted class;
//   report_heatmaps.json  which images, their true and predicted classes, the epoch;
//       report.html captions from it.
// The previous set is replaced (its files removed once the new manifest is in place).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/core/device.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/dataset.hpp"
#include "pipeline/report/heatmap_manifest.hpp"

namespace bigtrain {

struct ReportHeatmapOptions {
  std::size_t correct = 2;       // how many correctly classified images to show
  std::size_t wrong = 2;         // and misclassified ones
  // Validation images classified at most to find them: bounds the cost when
  // mistakes are rare (then fewer wrong ones are shown, and the page says so).
  std::size_t max_scanned = 16;
  int max_side = 320;            // thumbnail's longer side, pixels
  int threads = 0;               // read/preprocess workers; 0: all cores
  Backend backend = Backend::cpu;  // where the best checkpoint classifies (the training run's device)
};

// The order validation images are scanned in: round robin over the classes (each
// class in its manifest order), so both correct and wrong ones of several classes
// turn up among the first few.
std::vector<std::size_t> heatmap_scan_order(const std::vector<Sample>& val, std::size_t classes);

// Classifies validation images with RUN_DIR/checkpoints/best.safetensors in
// heatmap_scan_order until it has options.correct correct and options.wrong wrong
// ones (or options.max_scanned were scanned) and writes their heatmaps and the
// manifest. Throws bigtrain::Error on failure.
ReportHeatmapSet write_report_heatmaps(const std::string& run_dir, const std::vector<Sample>& val,
                                       std::int64_t epoch, const ReportHeatmapOptions& options = {});

// `bigtrain report RUN_DIR --heatmaps`: the same for a finished run (one trained
// before this existed, or with BIGTRAIN_REPORT_HEATMAPS=0): the validation split from
// the run's config.yaml (as the trainer split it), the epoch from the checkpoint's
// metadata. Throws bigtrain::Error naming what is missing.
ReportHeatmapSet redraw_report_heatmaps(const std::string& run_dir, const ReportHeatmapOptions& options = {});

// The trainer's hook after a best checkpoint is written: heatmaps of a few correct
// and wrong validation images drawn with it into RUN_DIR/heatmaps/, then report.html
// again so it shows them. Rank 0 only; a failure is logged, never thrown.
// BIGTRAIN_REPORT_HEATMAPS=0 turns it off (e.g. for timing experiments that must not
// share the cores).
void refresh_report_heatmaps(const Config& config, const Dataset& dataset, std::int64_t epoch,
                             Backend backend = Backend::cpu);

}  // namespace bigtrain
