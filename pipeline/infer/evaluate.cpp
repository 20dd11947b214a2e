#include "pipeline/infer/evaluate.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "kernels/core/error.hpp"
#include "pipeline/common/atomic_file.hpp"

namespace bigtrain {
namespace {

nlohmann::json number_or_null(double value) { return std::isnan(value) ? nlohmann::json() : nlohmann::json(value); }

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

}  // namespace

std::vector<double> precision_per_class(const std::vector<std::vector<std::int64_t>>& confusion) {
  std::vector<double> precision;
  for (std::size_t k = 0; k < confusion.size(); ++k) {
    std::int64_t predicted = 0;
    for (const auto& row : confusion) predicted += row[k];
    precision.push_back(predicted > 0 ? static_cast<double>(confusion[k][k]) / static_cast<double>(predicted)
                                      : std::numeric_limits<double>::quiet_NaN());
  }
  return precision;
}

EvaluationReport evaluate_split(InferenceEngine& engine, const std::vector<std::string>& classes,
                                const std::vector<Sample>& split, const std::string& split_name) {
  EvaluationReport report;
  report.split = split_name;
  report.classes = classes;
  std::vector<InferenceItem> items;
  for (const Sample& s : split) items.push_back({s.path, s.label});
  std::vector<int> labels;
  std::vector<std::vector<float>> probabilities;
  std::vector<double> losses;
  report.stats = engine.run(items, [&](ImagePrediction&& p) {
    if (!p.ok()) {
      report.failures.emplace_back(p.path, p.error);
      return;
    }
    const int label = split[p.index].label;
    labels.push_back(label);
    probabilities.push_back(p.probabilities);
    losses.push_back(p.loss);
    report.images.push_back({p.path, label, p.probabilities, p.top_class, p.loss, p.tiles});
  });
  report.metrics = compute_metrics(labels, probabilities, losses, classes.size());
  report.precision = precision_per_class(report.metrics.confusion);
  return report;
}

std::string evaluation_json(const EvaluationReport& r) {
  const ClassificationMetrics& m = r.metrics;
  nlohmann::json per_class = nlohmann::json::object();
  for (std::size_t k = 0; k < r.classes.size(); ++k)
    per_class[r.classes[k]] = {{"precision", number_or_null(r.precision[k])},
                               {"recall", number_or_null(m.recall[k])}};
  nlohmann::json failures = nlohmann::json::array();
  for (const auto& [path, error] : r.failures) failures.push_back({{"path", path}, {"error", error}});
  return nlohmann::json{{"split", r.split},
                        {"images", m.images},
                        {"failed", r.failures.size()},
                        {"loss", m.loss},
                        {"accuracy", m.accuracy},
                        {"balanced_accuracy", m.balanced_accuracy},
                        {"roc_auc", m.auc ? nlohmann::json(*m.auc) : nlohmann::json()},
                        {"classes", r.classes},
                        {"per_class", per_class},
                        {"confusion", m.confusion},
                        {"tiles", r.stats.tiles},
                        {"seconds", r.stats.seconds},
                        {"failures", failures}}
      .dump(2);
}

std::string predictions_csv(const EvaluationReport& r) {
  std::string csv = "path,label,predicted,loss,tiles";
  for (const auto& name : r.classes) csv += ",p_" + csv_field(name);
  csv += "\n";
  for (const EvaluatedImage& image : r.images) {
    csv += fmt::format("{},{},{},{:.9g},{}", csv_field(image.path), csv_field(r.classes[image.label]),
                       csv_field(r.classes[image.predicted]), image.loss, image.tiles);
    for (float p : image.probabilities) csv += fmt::format(",{:.9g}", p);
    csv += "\n";
  }
  return csv;
}

void write_confusion_png(const std::string& path, const ClassificationMetrics& m,
                         const std::vector<std::string>& classes) {
  const int n = static_cast<int>(classes.size());
  const int cell = std::clamp(600 / std::max(n, 1), 28, 90), label_width = 110, top = 60;
  cv::Mat canvas(top + n * cell + 20, label_width + n * cell + 20, CV_8UC3, cv::Scalar(255, 255, 255));
  const auto font = cv::FONT_HERSHEY_SIMPLEX;
  const double scale = std::clamp(cell / 70.0, 0.35, 0.6);
  cv::putText(canvas, "predicted ->", {label_width, 18}, font, 0.45, cv::Scalar(0, 0, 0), 1, cv::LINE_AA);
  for (int t = 0; t < n; ++t) {
    std::int64_t row_total = 0;
    for (std::int64_t c : m.confusion[static_cast<std::size_t>(t)]) row_total += c;
    cv::putText(canvas, classes[static_cast<std::size_t>(t)].substr(0, 12), {6, top + t * cell + cell / 2 + 5}, font,
                scale, cv::Scalar(0, 0, 0), 1, cv::LINE_AA);
    cv::putText(canvas, classes[static_cast<std::size_t>(t)].substr(0, 8), {label_width + t * cell + 4, top - 8}, font,
                scale, cv::Scalar(0, 0, 0), 1, cv::LINE_AA);
    for (int p = 0; p < n; ++p) {
      const std::int64_t count = m.confusion[static_cast<std::size_t>(t)][static_cast<std::size_t>(p)];
      const double fraction = row_total > 0 ? static_cast<double>(count) / static_cast<double>(row_total) : 0.0;
      // White to dark blue by the fraction of the true class's images.
      const cv::Scalar colour(255 - 100 * fraction, 255 - 200 * fraction, 255 - 230 * fraction);
      const cv::Rect box(label_width + p * cell, top + t * cell, cell, cell);
      cv::rectangle(canvas, box, colour, cv::FILLED);
      cv::rectangle(canvas, box, cv::Scalar(160, 160, 160), 1);
      const cv::Scalar ink = fraction > 0.5 ? cv::Scalar(255, 255, 255) : cv::Scalar(0, 0, 0);
      cv::putText(canvas, std::to_string(count), {box.x + 6, box.y + cell / 2 + 5}, font, scale, ink, 1, cv::LINE_AA);
    }
  }
  std::vector<std::uint8_t> bytes;
  if (!cv::imencode(".png", canvas, bytes)) throw Error(fmt::format("{}: PNG encoding failed", path));
  write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace bigtrain
