#pragma once
// `bigtrain eval`: a checkpoint's metrics on a labelled split, through the same
// inference engine as `bigtrain infer` (and so the same per-image computation as the
// evaluation inside training).
#include <string>
#include <vector>

#include "pipeline/data/dataset.hpp"
#include "pipeline/engine/metrics.hpp"
#include "pipeline/infer/infer.hpp"

namespace bigtrain {

struct EvaluatedImage {
  std::string path;
  int label = 0;
  std::vector<float> probabilities;
  int predicted = -1;
  double loss = 0.0;
  std::int64_t tiles = 0;
};

struct EvaluationReport {
  std::string split;
  std::vector<std::string> classes;
  ClassificationMetrics metrics;   // over the images that could be read
  std::vector<double> precision;   // per class; NaN for a class never predicted
  std::vector<EvaluatedImage> images;
  std::vector<std::pair<std::string, std::string>> failures;  // path, error
  InferenceStats stats;
};

EvaluationReport evaluate_split(InferenceEngine& engine, const std::vector<std::string>& classes,
                                const std::vector<Sample>& split, const std::string& split_name);

// Precision per predicted class from a confusion matrix [true][predicted].
std::vector<double> precision_per_class(const std::vector<std::vector<std::int64_t>>& confusion);

std::string evaluation_json(const EvaluationReport& report);
std::string predictions_csv(const EvaluationReport& report);
// The confusion matrix as an annotated image: counts in cells shaded by the row's
// fraction (recall), true classes down, predicted across.
void write_confusion_png(const std::string& path, const ClassificationMetrics& metrics,
                         const std::vector<std::string>& classes);

}  // namespace bigtrain
