#pragma once
// What a run directory holds, read back for the report and the TensorBoard scalars:
// metrics.csv, confusion_<split>.csv and data_summary.json.
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/data/dataset.hpp"

namespace bigtrain {

struct MetricsTable;

struct MetricsRow {
  std::int64_t epoch = 0;
  std::string split;
  std::vector<double> values;  // one per column; NaN where the cell is empty or not a number
  double value(const MetricsTable& table, std::string_view column) const;
};

struct MetricsTable {
  std::vector<std::string> columns;
  std::vector<MetricsRow> rows;
  int column(std::string_view name) const;  // -1 when absent
};

// Throws Error naming `source` and the line for a row with the wrong number of cells
// or a bad epoch.
MetricsTable parse_metrics_csv(std::string_view text, const std::string& source);

struct ConfusionMatrix {
  std::vector<std::string> classes;            // predicted = true class order
  std::vector<std::vector<std::int64_t>> counts;  // [true][predicted]
};
ConfusionMatrix parse_confusion_csv(std::string_view text, const std::string& source);

// Images per class and split, and the images left out, as the trainer saw them.
struct DataSummary {
  std::vector<std::string> classes;
  std::map<std::string, std::vector<std::int64_t>> images_per_class;  // split -> counts
  std::vector<SkippedSample> skipped;
};
DataSummary summarize_dataset(const Dataset& dataset);
std::string data_summary_json(const DataSummary& summary);
DataSummary parse_data_summary_json(std::string_view text, const std::string& source);

}  // namespace bigtrain
