#pragma once
// `bigtrain compare`: several configs trained (or their existing runs read) on the
// same data, side by side. Every figure comes from each run's own metrics.csv, so a
// table row can always be checked against its run directory.
#include <cstdint>
#include <string>
#include <vector>

namespace bigtrain {

struct CompareRow {
  std::string name;     // the run's name (its config file's stem)
  std::string run_dir;
  std::int64_t epochs = 0;
  // The test split when the run has one (and it is preferred), else the last validation row.
  std::string split;
  double accuracy = 0.0, balanced_accuracy = 0.0, loss = 0.0;
  double train_seconds_per_epoch = 0.0;  // mean over training rows
  double train_images_per_s = 0.0;       // mean over training rows
  double train_tiles_per_s = 0.0;
  double tiles_per_image = 0.0;          // training tiles over training images
  std::int64_t peak_allocated_bytes = 0;  // the most over all rows
  std::int64_t peak_rss_bytes = 0;
};

// Reads `run_dir`/metrics.csv (written by the trainer). `prefer_test` false takes
// the last validation row even when there is a test row (a sweep chooses settings
// on validation, never on test). Throws bigtrain::Error naming the file when it is
// missing, has no training row, or lacks a column.
CompareRow compare_row_from_run(const std::string& name, const std::string& run_dir, bool prefer_test = true);

// Best first (accuracy, then balanced accuracy, then lower loss).
void sort_best_first(std::vector<CompareRow>& rows);
std::string compare_csv(const std::vector<CompareRow>& rows);
std::string compare_markdown(const std::vector<CompareRow>& rows);

}  // namespace bigtrain
