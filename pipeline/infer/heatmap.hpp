#pragma once
// Tile heatmaps of one image's prediction: the attention weight of each tile
// (attention aggregator) or the probability the head gives the chosen class from
// that tile's feature alone (mean and max aggregators), averaged where tiles
// overlap.
//
//   PNG:  drawn over a thumbnail of the image (longer side `max_side`), colour scale
//         (OpenCV's colormap) with a legend naming the quantity and its range.
//   TIFF: pyramidal BigTIFF stored in 256 x 256 blocks, one pixel per tile step (the
//         largest cell that tiles and their overlaps align to), so even a 100k x 100k
//         image's heatmap stays small; pixels no tile covers are black.
// Both are written to a temporary name and renamed.
#include <string>
#include <vector>

#include <opencv2/core.hpp>

#include "pipeline/infer/infer.hpp"

namespace bigtrain {

struct HeatmapValues {
  std::vector<float> values;  // one per tile of the prediction
  float low = 0.0f, high = 1.0f;  // the colour scale's ends
  std::string quantity;       // "attention" or "P(<class>)", for the legend
};

// Attention weights when the prediction has them (scale 0 .. the largest weight),
// else the tiles' probability of `class_index` (-1: the image's top class; scale 0..1).
HeatmapValues heatmap_values(const ImagePrediction& prediction, const std::vector<std::string>& classes,
                             bool attention, int class_index = -1);

// Mean of the values of the tiles covering each cell of a width x height raster
// whose cells are `cell_x` x `cell_y` grid pixels (rect.x / cell_x, rounded). Returns
// CV_32F; NaN where no tile lies.
cv::Mat average_tile_values(const std::vector<cv::Rect>& rects, const std::vector<float>& values, int width,
                            int height, double cell_x, double cell_y);

// The colour (RGB) the heatmaps give a value on the scale [low, high].
cv::Vec3b heatmap_colour(float value, float low, float high);

void write_heatmap_png(const std::string& path, const ImagePrediction& prediction, const HeatmapValues& values,
                       int max_side = 1024);
void write_heatmap_tiff(const std::string& path, const ImagePrediction& prediction, const HeatmapValues& values);

// `base` for one image of many: base.png -> base_<stem>.png (stem of the image path).
std::string heatmap_path_for(const std::string& base, const std::string& image_path, bool many);

}  // namespace bigtrain
