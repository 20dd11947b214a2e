#pragma once
// RUN_DIR/report.html: one self-contained page (inline SVG charts, PNGs as base64
// data URIs, no scripts, no network) that shows a run: loss and accuracy per epoch
// for training and validation on shared axes, learning rate, throughput, peak
// memory, the confusion matrices, heatmaps found under RUN_DIR/heatmaps/, the
// resolved config and the data summary. Everything comes from files in the run
// directory, so `bigtrain report RUN_DIR` regenerates the page the trainer wrote.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pipeline/data/dataset.hpp"

namespace bigtrain {

struct ChartSeries {
  std::string name;
  std::string colour;  // CSS colour
  std::vector<std::pair<double, double>> points;  // (x, y); NaN y are left out
};

// An SVG line chart with axes, ticks and a legend. data-chart=`id` and data-series
// per line let a test find them in the rendered DOM.
std::string svg_line_chart(const std::string& id, const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<ChartSeries>& series);

std::string html_escape(std::string_view text);
std::string base64_encode(std::string_view bytes);

// A page for a table of runs (`bigtrain compare`, `bigtrain sweep`): the CSV as a
// table with the best row marked (class "best", a star), a bar chart of
// `metric_column`, and each row's `link_column` (a run directory) linked to its
// report.html, relative to `page_dir` (the folder the page is written to).
// A run's own report.html shows the sweep.csv / compare.csv of the folder above it
// (when that table has a row for the run) the same way, its row marked.
struct TablePage {
  std::string title;
  std::string csv;          // header + rows, as in compare.csv
  std::size_t best_row = 0;  // index among the data rows
  std::string metric_column = "accuracy";
  std::string link_column = "run_dir";
  std::string page_dir;
  std::string kind = "compare";  // "sweep" | "compare": data-table of the <table>
  std::string subtitle;          // a line under the title (e.g. the sweep's grid)
  // When set, each row's run is runs_dir/<last folder of its link cell> (sweep and
  // compare put every run in their output folder), so links do not depend on the
  // working directory the table was written from.
  std::string runs_dir;
  std::optional<std::size_t> this_row;  // marked "this run" (a run's own report)
};
std::string render_table_report(const TablePage& page);

// DIR/<kind>.html from DIR/<kind>.csv (kind: "sweep" or "compare"; rows best first,
// so the first is marked best), links to DIR/<run>/report.html; then rewrites each
// listed run's report.html that exists, so it shows the table too. Returns the page's path.
std::string write_table_report(const std::string& dir, const std::string& kind, const std::string& subtitle = "");

// Builds the page from the files in `run_dir`.
std::string render_run_report(const std::string& run_dir);

// Writes RUN_DIR/report.html atomically, and RUN_DIR/data_summary.json first when
// `dataset` is given (the trainer passes it; `bigtrain report` reads the saved one).
// Returns the report's path.
std::string write_run_report(const std::string& run_dir, const Dataset* dataset = nullptr);

// The trainer's end-of-epoch hook: report.html and the TensorBoard event file. A
// failure is logged, not thrown: a page must never stop a training run.
void update_run_outputs(const std::string& run_dir, const Dataset& dataset);

}  // namespace bigtrain
