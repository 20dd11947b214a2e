#include "pipeline/report/report_data.hpp"

#include <charconv>
#include <limits>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/core/error.hpp"

namespace bigtrain {
namespace {

std::vector<std::string> split_cells(std::string_view line) {
  std::vector<std::string> cells;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = line.find(',', start);
    cells.emplace_back(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return cells;
}

std::vector<std::string> lines_of(std::string_view text) {
  std::vector<std::string> lines;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

double number_or_nan(const std::string& cell) {
  if (cell.empty()) return std::numeric_limits<double>::quiet_NaN();
  try {
    std::size_t used = 0;
    const double value = std::stod(cell, &used);
    return used == cell.size() ? value : std::numeric_limits<double>::quiet_NaN();
  } catch (const std::exception&) {
    return std::numeric_limits<double>::quiet_NaN();
  }
}

}  // namespace

int MetricsTable::column(std::string_view name) const {
  for (std::size_t i = 0; i < columns.size(); ++i)
    if (columns[i] == name) return static_cast<int>(i);
  return -1;
}

double MetricsRow::value(const MetricsTable& table, std::string_view column) const {
  const int index = table.column(column);
  return index < 0 ? std::numeric_limits<double>::quiet_NaN() : values[static_cast<std::size_t>(index)];
}

MetricsTable parse_metrics_csv(std::string_view text, const std::string& source) {
  const auto lines = lines_of(text);
  if (lines.empty()) throw Error(fmt::format("{}: empty, expected a header line", source));
  MetricsTable table;
  table.columns = split_cells(lines[0]);
  if (table.column("epoch") != 0 || table.column("split") != 1)
    throw Error(fmt::format("{}:1: the header must start with epoch,split", source));
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto cells = split_cells(lines[i]);
    if (cells.size() != table.columns.size())
      throw Error(fmt::format("{}:{}: {} cells, the header has {}", source, i + 1, cells.size(), table.columns.size()));
    MetricsRow row;
    const auto parsed = std::from_chars(cells[0].data(), cells[0].data() + cells[0].size(), row.epoch);
    if (parsed.ec != std::errc() || parsed.ptr != cells[0].data() + cells[0].size())
      throw Error(fmt::format("{}:{}: epoch '{}' is not an integer", source, i + 1, cells[0]));
    row.split = cells[1];
    for (const auto& cell : cells) row.values.push_back(number_or_nan(cell));
    table.rows.push_back(std::move(row));
  }
  return table;
}

ConfusionMatrix parse_confusion_csv(std::string_view text, const std::string& source) {
  const auto lines = lines_of(text);
  if (lines.empty()) throw Error(fmt::format("{}: empty, expected a header of predicted classes", source));
  ConfusionMatrix matrix;
  auto header = split_cells(lines[0]);
  matrix.classes.assign(header.begin() + 1, header.end());
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto cells = split_cells(lines[i]);
    if (cells.size() != header.size())
      throw Error(fmt::format("{}:{}: {} cells, the header has {}", source, i + 1, cells.size(), header.size()));
    std::vector<std::int64_t> counts;
    for (std::size_t c = 1; c < cells.size(); ++c) {
      std::int64_t count = 0;
      const auto parsed = std::from_chars(cells[c].data(), cells[c].data() + cells[c].size(), count);
      if (parsed.ec != std::errc() || count < 0)
        throw Error(fmt::format("{}:{}: '{}' is not a count", source, i + 1, cells[c]));
      counts.push_back(count);
    }
    matrix.counts.push_back(std::move(counts));
  }
  return matrix;
}

DataSummary summarize_dataset(const Dataset& dataset) {
  DataSummary summary;
  summary.classes = dataset.classes;
  summary.images_per_class["train"] = dataset.class_counts(dataset.train);
  summary.images_per_class["val"] = dataset.class_counts(dataset.val);
  summary.images_per_class["test"] = dataset.class_counts(dataset.test);
  summary.skipped = dataset.skipped;
  return summary;
}

std::string data_summary_json(const DataSummary& summary) {
  nlohmann::json json;
  json["classes"] = summary.classes;
  json["images_per_class"] = summary.images_per_class;
  json["skipped"] = nlohmann::json::array();
  for (const auto& skipped : summary.skipped) json["skipped"].push_back({{"origin", skipped.origin}, {"reason", skipped.reason}});
  return json.dump(2) + "\n";
}

DataSummary parse_data_summary_json(std::string_view text, const std::string& source) {
  try {
    const auto json = nlohmann::json::parse(text);
    DataSummary summary;
    summary.classes = json.at("classes").get<std::vector<std::string>>();
    summary.images_per_class = json.at("images_per_class").get<std::map<std::string, std::vector<std::int64_t>>>();
    for (const auto& skipped : json.at("skipped"))
      summary.skipped.push_back({skipped.at("origin").get<std::string>(), skipped.at("reason").get<std::string>()});
    return summary;
  } catch (const nlohmann::json::exception& error) {
    throw Error(fmt::format("{}: {}", source, error.what()));
  }
}

}  // namespace bigtrain
