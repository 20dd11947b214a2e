#include "pipeline/engine/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "kernels/core/error.hpp"

namespace bigtrain {

std::optional<double> roc_auc(const std::vector<int>& is_positive, const std::vector<double>& scores) {
  BT_CHECK(is_positive.size() == scores.size(), "roc_auc: {} labels for {} scores", is_positive.size(), scores.size());
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores[a] < scores[b]; });
  // Average ranks over ties, then the rank-sum statistic.
  double positive_rank_sum = 0.0;
  std::int64_t positives = 0;
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (std::size_t k = i; k < j; ++k)
      if (is_positive[order[k]]) {
        positive_rank_sum += rank;
        ++positives;
      }
    i = j;
  }
  const std::int64_t negatives = static_cast<std::int64_t>(scores.size()) - positives;
  if (positives == 0 || negatives == 0) return std::nullopt;
  const double p = static_cast<double>(positives), n = static_cast<double>(negatives);
  return (positive_rank_sum - p * (p + 1) / 2.0) / (p * n);
}

ClassificationMetrics compute_metrics(const std::vector<int>& labels,
                                      const std::vector<std::vector<float>>& probabilities,
                                      const std::vector<double>& losses, std::size_t num_classes) {
  BT_CHECK(labels.size() == probabilities.size() && labels.size() == losses.size(),
           "metrics: {} labels, {} probability rows, {} losses", labels.size(), probabilities.size(), losses.size());
  ClassificationMetrics m;
  m.images = static_cast<std::int64_t>(labels.size());
  m.confusion.assign(num_classes, std::vector<std::int64_t>(num_classes, 0));
  std::int64_t correct = 0;
  double loss_total = 0.0;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    BT_CHECK(probabilities[i].size() == num_classes, "metrics: image {} has {} probabilities for {} classes", i,
             probabilities[i].size(), num_classes);
    const auto predicted = static_cast<std::size_t>(
        std::max_element(probabilities[i].begin(), probabilities[i].end()) - probabilities[i].begin());
    const auto truth = static_cast<std::size_t>(labels[i]);
    ++m.confusion.at(truth).at(predicted);
    correct += predicted == truth;
    loss_total += losses[i];
  }
  if (m.images == 0) return m;
  m.loss = loss_total / static_cast<double>(m.images);
  m.accuracy = static_cast<double>(correct) / static_cast<double>(m.images);
  double recall_sum = 0.0;
  int present = 0;
  for (std::size_t c = 0; c < num_classes; ++c) {
    const std::int64_t total = std::accumulate(m.confusion[c].begin(), m.confusion[c].end(), std::int64_t{0});
    if (total == 0) {
      m.recall.push_back(std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    m.recall.push_back(static_cast<double>(m.confusion[c][c]) / static_cast<double>(total));
    recall_sum += m.recall.back();
    ++present;
  }
  m.balanced_accuracy = present ? recall_sum / present : 0.0;
  if (num_classes == 2) {
    std::vector<int> positive;
    std::vector<double> scores;
    for (std::size_t i = 0; i < labels.size(); ++i) {
      positive.push_back(labels[i] == 1);
      scores.push_back(probabilities[i][1]);
    }
    m.auc = roc_auc(positive, scores);
  }
  return m;
}

std::string confusion_csv(const ClassificationMetrics& metrics, const std::vector<std::string>& classes) {
  std::string out = "true\\predicted";
  for (const auto& name : classes) out += "," + name;
  out += "\n";
  for (std::size_t t = 0; t < metrics.confusion.size(); ++t) {
    out += classes.at(t);
    for (std::int64_t count : metrics.confusion[t]) out += fmt::format(",{}", count);
    out += "\n";
  }
  return out;
}

}  // namespace bigtrain
