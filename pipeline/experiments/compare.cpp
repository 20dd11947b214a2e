#include "pipeline/experiments/compare.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "kernels/core/error.hpp"

namespace bigtrain {
namespace {

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream stream(line);
  std::string field;
  while (std::getline(stream, field, ',')) fields.push_back(field);
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

double number(const std::string& text) {
  if (text.empty()) return 0.0;
  try {
    return std::stod(text);
  } catch (const std::exception&) {
    return 0.0;
  }
}

}  // namespace

CompareRow compare_row_from_run(const std::string& name, const std::string& run_dir, bool prefer_test) {
  const std::string path = run_dir + "/metrics.csv";
  std::ifstream in(path);
  BT_CHECK(in, "{}: cannot open the run's metrics (was the run trained?)", path);
  std::string line;
  BT_CHECK(static_cast<bool>(std::getline(in, line)), "{}: empty file", path);
  const std::vector<std::string> header = split_csv_line(line);
  std::map<std::string, std::size_t> column;
  for (std::size_t i = 0; i < header.size(); ++i) column[header[i]] = i;
  for (const char* needed : {"epoch", "split", "loss", "accuracy", "balanced_accuracy", "seconds", "images_per_s",
                             "tiles_per_s", "peak_allocated_bytes", "peak_rss_bytes"})
    BT_CHECK(column.contains(needed), "{}: no `{}` column", path, needed);
  CompareRow row;
  row.name = name;
  row.run_dir = run_dir;
  std::vector<std::string> last_val, test;
  double seconds = 0.0, images_per_s = 0.0, tiles_per_s = 0.0, images = 0.0, tiles = 0.0;
  std::int64_t train_rows = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const std::vector<std::string> f = split_csv_line(line);
    BT_CHECK(f.size() >= header.size(), "{}: a row has {} fields, the header {}", path, f.size(), header.size());
    const std::string& split = f[column["split"]];
    row.peak_allocated_bytes =
        std::max(row.peak_allocated_bytes, static_cast<std::int64_t>(number(f[column["peak_allocated_bytes"]])));
    row.peak_rss_bytes = std::max(row.peak_rss_bytes, static_cast<std::int64_t>(number(f[column["peak_rss_bytes"]])));
    if (split == "train") {
      ++train_rows;
      row.epochs = std::max(row.epochs, static_cast<std::int64_t>(number(f[column["epoch"]])));
      seconds += number(f[column["seconds"]]);
      images_per_s += number(f[column["images_per_s"]]);
      tiles_per_s += number(f[column["tiles_per_s"]]);
      if (column.contains("images") && column.contains("tiles")) {
        images += number(f[column["images"]]);
        tiles += number(f[column["tiles"]]);
      }
    } else if (split == "val") {
      last_val = f;
    } else if (split == "test") {
      test = f;
    }
  }
  BT_CHECK(train_rows > 0, "{}: no training rows", path);
  row.train_seconds_per_epoch = seconds / static_cast<double>(train_rows);
  row.train_images_per_s = images_per_s / static_cast<double>(train_rows);
  row.train_tiles_per_s = tiles_per_s / static_cast<double>(train_rows);
  row.tiles_per_image = images > 0.0 ? tiles / images : 0.0;
  const bool use_test = !test.empty() && (prefer_test || last_val.empty());
  const std::vector<std::string>& chosen = use_test ? test : last_val;
  BT_CHECK(!chosen.empty(), "{}: no validation or test rows", path);
  row.split = use_test ? "test" : "val";
  row.accuracy = number(chosen[column["accuracy"]]);
  row.balanced_accuracy = number(chosen[column["balanced_accuracy"]]);
  row.loss = number(chosen[column["loss"]]);
  return row;
}

void sort_best_first(std::vector<CompareRow>& rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const CompareRow& a, const CompareRow& b) {
    if (a.accuracy != b.accuracy) return a.accuracy > b.accuracy;
    if (a.balanced_accuracy != b.balanced_accuracy) return a.balanced_accuracy > b.balanced_accuracy;
    return a.loss < b.loss;
  });
}

std::string compare_csv(const std::vector<CompareRow>& rows) {
  std::string out =
      "name,split,epochs,accuracy,balanced_accuracy,loss,train_seconds_per_epoch,train_images_per_s,"
      "train_tiles_per_s,tiles_per_image,peak_allocated_bytes,peak_rss_bytes,run_dir\n";
  for (const CompareRow& r : rows)
    out += fmt::format("{},{},{},{:.6f},{:.6f},{:.6f},{:.3f},{:.3f},{:.3f},{:.2f},{},{},{}\n", r.name, r.split,
                       r.epochs, r.accuracy, r.balanced_accuracy, r.loss, r.train_seconds_per_epoch,
                       r.train_images_per_s, r.train_tiles_per_s, r.tiles_per_image, r.peak_allocated_bytes,
                       r.peak_rss_bytes, r.run_dir);
  return out;
}

std::string compare_markdown(const std::vector<CompareRow>& rows) {
  std::string out =
      "| run | split | epochs | accuracy | balanced acc. | loss | train s/epoch | images/s | tiles/s | tiles/image | "
      "peak alloc. MiB | peak RSS MiB |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const CompareRow& r : rows)
    out += fmt::format("| {} | {} | {} | {:.3f} | {:.3f} | {:.4f} | {:.1f} | {:.2f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |\n",
                       r.name, r.split, r.epochs, r.accuracy, r.balanced_accuracy, r.loss, r.train_seconds_per_epoch,
                       r.train_images_per_s, r.train_tiles_per_s, r.tiles_per_image,
                       static_cast<double>(r.peak_allocated_bytes) / (1 << 20),
                       static_cast<double>(r.peak_rss_bytes) / (1 << 20));
  return out;
}

}  // namespace bigtrain
