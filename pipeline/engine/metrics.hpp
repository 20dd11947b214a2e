#pragma once
// Image-level classification metrics of one split and epoch.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bigtrain {

struct ClassificationMetrics {
  double loss = 0.0;      // mean cross-entropy
  double accuracy = 0.0;
  double balanced_accuracy = 0.0;          // mean recall over classes present in the labels
  std::vector<double> recall;              // per class; NaN for a class with no images
  std::vector<std::vector<std::int64_t>> confusion;  // [true][predicted]
  std::optional<double> auc;               // ROC AUC, two classes only (ties count one half)
  std::int64_t images = 0;
};

// `probabilities[i]` are image i's class probabilities; the prediction is the argmax
// (the lowest index among ties).
ClassificationMetrics compute_metrics(const std::vector<int>& labels,
                                      const std::vector<std::vector<float>>& probabilities,
                                      const std::vector<double>& losses, std::size_t num_classes);

// Mann-Whitney form of the ROC AUC: P(score of a positive > score of a negative),
// ties counted one half. nullopt when either class is absent.
std::optional<double> roc_auc(const std::vector<int>& is_positive, const std::vector<double>& scores);

// The confusion matrix as CSV: a header of predicted class names, one row per true class.
std::string confusion_csv(const ClassificationMetrics& metrics, const std::vector<std::string>& classes);

}  // namespace bigtrain
