#pragma once
// What the pretexts' tests (rotation, contrast) share: a small set of four classes
// (128^2 canvases, three digits of the label, no clutter) made once per suite, a
// config of a small encoder over it, and that encoder.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "net/model.hpp"
#include "pipeline/config/config.hpp"
#include "tests/support/demo_dataset.hpp"

namespace bigtrain::testing {

class PretextSuite : public ::testing::Test {
 protected:
  static void make_set(const std::string& scratch_name, int train_images) {
    root_ = fresh_scratch_dir(scratch_name);
    make_test_demo_data({.out = (root_ / "data").string(), .size = 128, .classes = {0, 1, 2, 3},
                         .train = train_images, .val = 4, .test = 0, .label_digits = 3, .other_digits = 0,
                         .clutter_lines = 0, .block_size = 32, .seed = 5});
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(root_); }

  // `train` and `pretrain` are the sections' flow mappings ("{epochs: 2}").
  static Config pretext_config(const std::string& train, const std::string& pretrain, const std::string& source) {
    return parse_config(fmt::format(R"(data: {{train: {0}/train.csv, val: {0}/val.csv, mean: [0.1], std: [0.3]}}
tiler: {{tile: 64, overlap: 32, border: shift}}
model: {{preset: small, in_channels: 1, width: 0.5, stem: {{kernel: 5, stride: 2, maxpool: false}}}}
aggregator: {{kind: instance}}
train: {1}
pretrain: {2}
device: {{type: cpu}}
)",
                                    (root_ / "data").string(), train, pretrain),
                        source);
  }

  static std::unique_ptr<net::Model> four_class_model(const Config& c) {
    YAML::Node node = YAML::Clone(c.model);
    node["num_classes"] = 4;
    return std::make_unique<net::Model>(net::model_spec_from_yaml(node, c.source), 7);
  }

  static inline std::filesystem::path root_;
};

}  // namespace bigtrain::testing
