#pragma once
// train.diagnostics (issue 16): why a weakly labelled run does or does not learn,
// measured while it trains. Two files in the run directory, a row per training
// image and a row per optimizer step:
//
//   diagnostics.csv  epoch, step, image, label, loss, tiles, evidence_tiles (tiles
//                    holding at least half of one of the label's objects),
//                    attention_entropy (H(a) / ln N: 1 = uniform over the tiles,
//                    0 = one tile), attention_max, attention_on_evidence (the
//                    weight the evidence tiles get together; uniform gives
//                    evidence_tiles / tiles), selected_evidence (with
//                    aggregator.top_tiles: evidence tiles among the selected ones)
//   gradients.csv    epoch, step, then the L2 norm of each weight's gradient (encoder
//                    layers in order, aggregator, head) before clipping
//
// The evidence needs the objects' boxes: `<manifest stem>.objects.csv` beside the
// training manifest (bigtrain make-demo-data writes it); without it those columns
// are empty. Each epoch also logs one line of means.
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <opencv2/core/types.hpp>

#include "kernels/core/tensor.hpp"
#include "net/parameter.hpp"
#include "pipeline/data/image_tiling.hpp"

namespace bigtrain {

// The label objects' boxes (level-0 pixels) of each image, by absolute path, from
// the objects file beside `manifest` (empty when there is none).
std::map<std::string, std::vector<cv::Rect>> load_label_boxes(const std::string& manifest);

// Which of the plan's tiles hold at least half of one box's area.
std::vector<bool> evidence_tiles(const ImageTiling& plan, const std::vector<cv::Rect>& boxes);

struct AttentionSummary {
  double entropy = 0.0;      // H(a) / ln N (0 when N = 1)
  double max = 0.0;
  double on_evidence = 0.0;  // sum of a over the evidence tiles
};
AttentionSummary summarize_attention(const std::vector<float>& attention, const std::vector<bool>& evidence);

class TrainingDiagnostics {
 public:
  // Opens (appends to) the run's two files; `weights` are the parameters whose
  // gradient norms are written, in that order.
  TrainingDiagnostics(const std::string& run_dir, const std::string& train_manifest,
                      std::vector<net::Parameter*> weights, Backend backend);

  // After an image's head forward: its plan, label, loss and attention (empty for
  // mean/max aggregators).
  // `selected`: the rows the head saw with top_tiles (empty: all).
  void image(std::int64_t epoch, std::int64_t step, const ImageTiling& plan, int label, double loss,
             const Tensor& attention, const std::vector<std::int64_t>& selected);
  // Before the optimizer step: the accumulated gradients.
  void step(std::int64_t epoch, std::int64_t step);
  // Logs the epoch's means and starts the next epoch's.
  void end_epoch(std::int64_t epoch);

 private:
  std::map<std::string, std::vector<cv::Rect>> boxes_;
  std::vector<net::Parameter*> weights_;
  Backend backend_;
  std::ofstream images_, gradients_;
  struct Sums {
    double images = 0, with_boxes = 0, tiles = 0, evidence = 0, entropy = 0, on_evidence = 0, uniform_on_evidence = 0;
    double selected = 0, selected_evidence = 0;
    double steps = 0, first_norm = 0, last_encoder_norm = 0, head_norm = 0;
  } sums_;
  std::size_t first_encoder_ = 0, last_encoder_ = 0, head_ = 0;
};

}  // namespace bigtrain
