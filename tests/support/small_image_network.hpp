#pragma once
// A small encoder (preset `small`, grey input, 3 classes, stem 5x5/2 without max
// pooling) with an aggregator: what the step tests of pipeline/engine train. Seeds
// are the caller's, so each suite keeps the weights its tolerances were set on.
#include <memory>
#include <string>

#include <fmt/format.h>

#include "net/aggregator.hpp"
#include "net/model.hpp"
#include "pipeline/engine/two_pass.hpp"

namespace bigtrain::testing {

struct SmallImageNetwork {
  std::unique_ptr<net::Model> model;
  std::unique_ptr<net::Aggregator> aggregator;
  ImageModel image_model() { return {&model->encoder(), aggregator.get(), &model->head()}; }
};

inline SmallImageNetwork make_small_image_network(const net::AggregatorSpec& aggregator, double width,
                                                  std::uint64_t model_seed, std::uint64_t aggregator_seed,
                                                  const std::string& source) {
  auto spec = net::model_spec_from_yaml_string(
      fmt::format("preset: small\nin_channels: 1\nnum_classes: 3\nstem: {{kernel: 5, stride: 2, maxpool: false}}\n"
                  "width: {}\n",
                  width),
      source);
  SmallImageNetwork network;
  network.model = std::make_unique<net::Model>(spec, model_seed);
  network.aggregator = net::make_aggregator(aggregator, network.model->encoder().feature_dim(), aggregator_seed);
  return network;
}

}  // namespace bigtrain::testing
