#pragma once
// A tile's pixels -> the network's input: channels matched to the model, scaled to
// [0, 1], augmented (training only), normalised per channel, laid out CHW float32.
//
// Augmentation is a pure function of the tile's seed, so pass 2 of training
// recomputes exactly the input pass 1 saw, and a resumed run draws what the
// uninterrupted run drew. Order: dihedral transform (flips, 90-degree turns; square
// tiles only), similarity transform (rotate, scale, shift), contrast around the tile's mean, brightness, Gaussian noise, then
// normalisation: (x - mean) / std, or per tile to mean 0 and standard deviation 1
// (after subtracting the tile's Gaussian blur, with data.normalize: highpass).
#include <cstdint>
#include <vector>

#include <opencv2/core.hpp>

#include "pipeline/config/config.hpp"

namespace bigtrain {

// data.normalize: tile divides by the tile's standard deviation or this, whichever
// is larger (pixels in [0, 1]).
inline constexpr double kFlatTileStd = 0.01;

struct Preprocessing {
  int channels = 1;          // the model's input channels
  std::vector<float> mean;   // one per model channel
  std::vector<float> std;
  bool per_tile = false;     // data.normalize: tile or highpass (mean and std unused)
  // data.normalize: highpass: the tile less its Gaussian blur of this sigma (pixels)
  // before the per-tile standardisation, so smooth illumination and texture, which
  // fill most tiles and tell them apart, leave the input and strokes remain; 0: off.
  double highpass_sigma = 0.0;
  bool augment = false;      // training
  AugmentationConfig augmentation;

  // From the config's data and train sections, for a model with `channels` inputs.
  static Preprocessing from_config(const Config& config, int channels, bool training);
};

// Writes channels x tile.rows x tile.cols floats to `out`. The tile is 8- or 16-bit
// with 1 or 3 channels; pixels are divided by `full_scale` (the image's, ImageTiling::
// full_scale; 0: the storage's 255 or 65535); RGB becomes grey (ITU-R BT.601 luma)
// for a 1-channel model, grey is repeated for a 3-channel one.
void preprocess_tile(const cv::Mat& tile, const Preprocessing& preprocessing, std::uint64_t seed, float* out,
                     int full_scale = 0);

}  // namespace bigtrain
