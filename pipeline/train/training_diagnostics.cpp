#include "pipeline/train/training_diagnostics.hpp"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "pipeline/data/demo_data.hpp"

namespace bigtrain {
namespace fs = std::filesystem;

std::map<std::string, std::vector<cv::Rect>> load_label_boxes(const std::string& manifest) {
  std::map<std::string, std::vector<cv::Rect>> boxes;
  const fs::path path(manifest);
  const fs::path objects = path.parent_path() / (path.stem().string() + ".objects.csv");
  if (manifest.empty() || !fs::is_regular_file(objects)) return boxes;
  for (const auto& [image, found] : read_demo_objects(objects.string())) {
    auto& list = boxes[fs::weakly_canonical(path.parent_path() / image).string()];
    for (const DemoObject& object : found)
      if (object.role == "label") list.emplace_back(object.x, object.y, object.width, object.height);
  }
  return boxes;
}

std::vector<bool> evidence_tiles(const ImageTiling& plan, const std::vector<cv::Rect>& boxes) {
  std::vector<bool> evidence(plan.tiles.size(), false);
  const double scale = plan.sampling.downsample;  // level-0 pixels per grid pixel
  for (std::size_t k = 0; k < plan.tiles.size(); ++k) {
    const cv::Rect& t = plan.tiles[k];
    const cv::Rect tile(static_cast<int>(std::lround(t.x * scale)), static_cast<int>(std::lround(t.y * scale)),
                        static_cast<int>(std::lround(t.width * scale)), static_cast<int>(std::lround(t.height * scale)));
    for (const cv::Rect& box : boxes)
      if (2 * (tile & box).area() >= box.area()) evidence[k] = true;
  }
  return evidence;
}

AttentionSummary summarize_attention(const std::vector<float>& attention, const std::vector<bool>& evidence) {
  BT_CHECK(attention.size() == evidence.size(), "diagnostics: {} attention weights for {} tiles", attention.size(),
           evidence.size());
  AttentionSummary summary;
  double entropy = 0.0;
  for (std::size_t k = 0; k < attention.size(); ++k) {
    const double a = attention[k];
    if (a > 0) entropy -= a * std::log(a);
    summary.max = std::max(summary.max, a);
    if (evidence[k]) summary.on_evidence += a;
  }
  summary.entropy = attention.size() > 1 ? entropy / std::log(static_cast<double>(attention.size())) : 0.0;
  return summary;
}

namespace {
std::ofstream open_append(const fs::path& path, const std::string& header) {
  const bool fresh = !fs::exists(path) || fs::file_size(path) == 0;
  std::ofstream out(path, std::ios::app);
  if (!out) throw Error(fmt::format("{}: cannot open for writing", path.string()));
  if (fresh) out << header << "\n";
  return out;
}

double l2_norm(const Tensor& grad) {
  if (!grad.defined()) return 0.0;
  double sum = 0.0;
  for (float g : grad.to_vector()) sum += static_cast<double>(g) * g;
  return std::sqrt(sum);
}
}  // namespace

TrainingDiagnostics::TrainingDiagnostics(const std::string& run_dir, const std::string& train_manifest,
                                         std::vector<net::Parameter*> weights, Backend backend)
    : boxes_(load_label_boxes(train_manifest)), weights_(std::move(weights)), backend_(backend) {
  BT_CHECK(!weights_.empty(), "diagnostics: no weights to watch");
  images_ = open_append(fs::path(run_dir) / "diagnostics.csv",
                        "epoch,step,image,label,loss,tiles,evidence_tiles,attention_entropy,attention_max,"
                        "attention_on_evidence,selected_evidence");
  std::string header = "epoch,step";
  for (const net::Parameter* p : weights_) header += ",grad_" + p->name;
  gradients_ = open_append(fs::path(run_dir) / "gradients.csv", header);
  // The first and last encoder convolutions and the head frame the epoch's log line.
  head_ = weights_.size() - 1;
  for (std::size_t k = 0; k < weights_.size(); ++k)
    if (weights_[k]->name.rfind("aggregator", 0) != 0 && k != head_) last_encoder_ = k;
  first_encoder_ = 0;
  if (boxes_.empty())
    spdlog::info("train.diagnostics: no objects file beside {}: evidence columns stay empty", train_manifest);
}

void TrainingDiagnostics::image(std::int64_t epoch, std::int64_t step, const ImageTiling& plan, int label, double loss,
                                const Tensor& attention, const std::vector<std::int64_t>& selected) {
  const auto found = boxes_.find(fs::weakly_canonical(plan.path).string());
  std::string evidence_text = ",,,";
  std::string attention_text = ",";
  sums_.images += 1;
  sums_.tiles += static_cast<double>(plan.tiles.size());
  std::vector<bool> evidence(plan.tiles.size(), false);
  std::int64_t evidence_count = 0;
  if (found != boxes_.end()) {
    evidence = evidence_tiles(plan, found->second);
    evidence_count = std::count(evidence.begin(), evidence.end(), true);
    sums_.with_boxes += 1;
    sums_.evidence += static_cast<double>(evidence_count);
    sums_.uniform_on_evidence += static_cast<double>(evidence_count) / static_cast<double>(plan.tiles.size());
  }
  if (attention.defined() && attention.numel() == static_cast<std::int64_t>(plan.tiles.size())) {
    const AttentionSummary a = summarize_attention(attention.to_vector(), evidence);
    sums_.entropy += a.entropy;
    if (found != boxes_.end()) sums_.on_evidence += a.on_evidence;
    attention_text = fmt::format("{:.5f},{:.5f}", a.entropy, a.max);
    evidence_text = found != boxes_.end() ? fmt::format("{},{},{:.5f}", evidence_count, attention_text, a.on_evidence)
                                          : fmt::format(",{},", attention_text);
  } else if (found != boxes_.end()) {
    evidence_text = fmt::format("{},,,", evidence_count);
  }
  std::string selected_text;
  if (!selected.empty() && found != boxes_.end()) {
    std::int64_t hits = 0;
    for (std::int64_t k : selected) hits += evidence.at(static_cast<std::size_t>(k)) ? 1 : 0;
    selected_text = std::to_string(hits);
    sums_.selected += 1;
    sums_.selected_evidence += static_cast<double>(hits);
  }
  images_ << fmt::format("{},{},{},{},{:.6f},{},{},{}\n", epoch, step, plan.path, label, loss, plan.tiles.size(),
                         evidence_text, selected_text);
  images_.flush();
}

void TrainingDiagnostics::step(std::int64_t epoch, std::int64_t step) {
  std::string row = fmt::format("{},{}", epoch, step);
  std::vector<double> norms;
  for (const net::Parameter* p : weights_) {
    norms.push_back(l2_norm(p->grad));
    row += fmt::format(",{:.6g}", norms.back());
  }
  sums_.steps += 1;
  sums_.first_norm += norms[first_encoder_];
  sums_.last_encoder_norm += norms[last_encoder_];
  sums_.head_norm += norms[head_];
  gradients_ << row << "\n";
  gradients_.flush();
}

void TrainingDiagnostics::end_epoch(std::int64_t epoch) {
  const Sums& s = sums_;
  const double images = std::max(1.0, s.images), boxed = std::max(1.0, s.with_boxes), steps = std::max(1.0, s.steps);
  spdlog::info("diagnostics epoch {}: {:.1f} tiles/image, {:.2f} hold evidence ({:.1f}%); attention entropy {:.3f} of "
               "uniform, {:.3f} of it on evidence (uniform: {:.3f}); mean gradient norm {} {:.3g}, {} {:.3g}, {} {:.3g}",
               epoch, s.tiles / images, s.evidence / boxed, 100.0 * s.evidence / std::max(1.0, s.tiles * boxed / images),
               s.entropy / images, s.on_evidence / boxed, s.uniform_on_evidence / boxed, weights_[first_encoder_]->name,
               s.first_norm / steps, weights_[last_encoder_]->name, s.last_encoder_norm / steps, weights_[head_]->name,
               s.head_norm / steps);
  if (s.selected > 0)
    spdlog::info("diagnostics epoch {}: the top tiles held {:.2f} evidence tiles per image (of {:.2f})", epoch,
                 s.selected_evidence / s.selected, s.evidence / boxed);
  sums_ = {};
}

}  // namespace bigtrain
