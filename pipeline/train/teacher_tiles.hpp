#pragma once
// train.teacher: which tiles of each training image a student trains on, chosen once
// by an earlier run's checkpoint (the teacher). On the seed-scale set an attention
// model finds the evidence long before it reads it (docs/learning.md, seventeenth
// session): its most attended tile holds a label digit in 76-85% of the training
// images, while its test accuracy is 0.42-0.54. Trained on those few tiles with the
// image's label, as ordinary minibatch classification, the same encoder reads the
// digits almost as well as on hand-cut crops. Validation, test and inference still
// see every tile.
#include <cstdint>
#include <string>
#include <vector>

#include <opencv2/core/types.hpp>

#include "kernels/core/device.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/data/dataset.hpp"
#include "tiler/tile_reader.hpp"

namespace bigtrain {

// One tile as the teacher scored it, in level-0 pixels so that a teacher read at
// another downsample or tile size still maps onto the student's grid.
struct TeacherTileScore {
  cv::Rect level0;
  float score = 0.0f;  // attention weight, or the head's probability of the image's label
};

// The student's tiles (grid pixels of `student_sampling`) for the teacher's `top`
// highest-scoring tiles: each matched to the student tile it overlaps most (in level
// 0), duplicates merged, in the order of `student_tiles`. Ties in score go to the
// earlier tile. Empty when no teacher tile overlaps any student tile.
std::vector<cv::Rect> match_teacher_tiles(std::vector<TeacherTileScore> teacher, std::int64_t top,
                                          const std::vector<cv::Rect>& student_tiles,
                                          const tiler::Sampling& student_sampling);

// For every image of `train`, in order: the tiles train.teacher selects (grid pixels of
// the image's training tiling under `config.tiler`). Scores with the teacher's own
// tiling and normalisation (its checkpoint metadata); ranks by attention when the
// teacher's aggregator has it, else by the probability of the image's label, which
// needs the teacher's classes to be the data's. Throws Error naming the checkpoint
// or the image on failure.
std::vector<std::vector<cv::Rect>> select_tiles_by_teacher(const Config& config, const std::vector<Sample>& train,
                                                           const std::vector<std::string>& classes, Backend backend);

}  // namespace bigtrain
