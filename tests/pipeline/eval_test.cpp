// `bigtrain eval`'s summaries: precision from the confusion matrix, the JSON a script
// reads, the confusion matrix image.
#include <gtest/gtest.h>
#include <string>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include <nlohmann/json.hpp>
#include <opencv2/imgcodecs.hpp>

#include "pipeline/infer/evaluate.hpp"

namespace bigtrain {
namespace {
namespace fs = std::filesystem;

TEST(EvalTest, PrecisionIsTheDiagonalOverEachPredictedColumn) {
  // [true][predicted]: class 0 predicted 5 times (4 right), class 1 predicted 3 times
  // (2 right), class 2 never predicted.
  const std::vector<std::vector<std::int64_t>> confusion = {{4, 1, 0}, {1, 2, 0}, {0, 0, 0}};
  const std::vector<double> precision = precision_per_class(confusion);
  ASSERT_EQ(precision.size(), 3u);
  EXPECT_DOUBLE_EQ(precision[0], 0.8);
  EXPECT_DOUBLE_EQ(precision[1], 2.0 / 3.0);
  EXPECT_TRUE(std::isnan(precision[2]));
}

EvaluationReport two_class_report() {
  EvaluationReport r;
  r.split = "test";
  r.classes = {"neg", "pos"};
  const std::vector<int> labels = {0, 0, 1, 1, 1};
  const std::vector<std::vector<float>> p = {{0.9f, 0.1f}, {0.4f, 0.6f}, {0.2f, 0.8f}, {0.3f, 0.7f}, {0.7f, 0.3f}};
  std::vector<double> losses;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    losses.push_back(-std::log(static_cast<double>(p[i][static_cast<std::size_t>(labels[i])])));
    r.images.push_back({"img" + std::to_string(i) + ".tif", labels[i], p[i], p[i][1] > p[i][0] ? 1 : 0, losses.back(), 4});
  }
  r.metrics = compute_metrics(labels, p, losses, 2);
  r.precision = precision_per_class(r.metrics.confusion);
  r.failures.emplace_back("broken.tif", "broken.tif: not a TIFF");
  return r;
}

TEST(EvalTest, JsonSummaryHasEveryMetric) {
  const EvaluationReport r = two_class_report();
  const nlohmann::json j = nlohmann::json::parse(evaluation_json(r));
  EXPECT_EQ(j["images"], 5);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_DOUBLE_EQ(j["accuracy"].get<double>(), 0.6);
  // Recall 1/2 and 2/3.
  EXPECT_NEAR(j["balanced_accuracy"].get<double>(), (0.5 + 2.0 / 3.0) / 2, 1e-12);
  // Positives 0.8, 0.7, 0.3 vs negatives 0.1, 0.6: 5 of 6 pairs ordered.
  EXPECT_NEAR(j["roc_auc"].get<double>(), 5.0 / 6.0, 1e-12);
  EXPECT_NEAR(j["per_class"]["pos"]["precision"].get<double>(), 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(j["per_class"]["neg"]["recall"].get<double>(), 0.5, 1e-12);
  EXPECT_EQ(j["confusion"], nlohmann::json({{1, 1}, {1, 2}}));
  EXPECT_EQ(j["failures"][0]["path"], "broken.tif");
  const std::string csv = predictions_csv(r);
  EXPECT_EQ(csv.substr(0, csv.find('\n')), "path,label,predicted,loss,tiles,p_neg,p_pos");
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 6);
}

TEST(EvalTest, ConfusionPngHasACellPerClassPair) {
  const EvaluationReport r = two_class_report();
  const fs::path out = fs::temp_directory_path() / ("bigtrain_eval_test_confusion_" + std::to_string(::getpid()) + ".png");
  write_confusion_png(out.string(), r.metrics, r.classes);
  const cv::Mat png = cv::imread(out.string(), cv::IMREAD_COLOR);
  fs::remove(out);
  ASSERT_FALSE(png.empty());
  // 2 cells of 90 px plus the labels' margins.
  EXPECT_EQ(png.cols, 110 + 2 * 90 + 20);
  EXPECT_EQ(png.rows, 60 + 2 * 90 + 20);
  // The diagonal cell of the better-recalled class is darker than its off-diagonal.
  const cv::Vec3b right = png.at<cv::Vec3b>(60 + 90 + 80, 110 + 90 + 80), wrong = png.at<cv::Vec3b>(60 + 90 + 80, 110 + 80);
  EXPECT_LT(right[2], wrong[2]);
}

}  // namespace
}  // namespace bigtrain
