#pragma once
// Typed specs from a validated config: where a config's choices (strings in YAML,
// checked by the reader) become the enums and structs of the layers below, once.
// Trainer, `bigtrain plan` and checkpoints consume these instead of comparing strings.
#include <string>
#include <string_view>
#include <vector>

#include "kernels/core/device.hpp"
#include "net/aggregator.hpp"
#include "net/model_spec.hpp"
#include "net/training_ops.hpp"
#include "pipeline/config/config.hpp"

namespace bigtrain {

net::AggregatorSpec aggregator_spec(const AggregatorConfig& config);

// The `model` section as a spec; num_classes as the section says (the trainer sets
// it from the data).
net::ModelSpec model_spec(const Config& config);

// The kernels ops the configured run calls, in the dtypes train.precision gives them
// (net::training_ops), from the config alone: the trainer and `bigtrain plan` ask the
// backend about each before they build anything.
std::vector<net::OpUse> training_ops(const Config& config);

// Empty when `backend` runs every op of training_ops(config), else the refusal as a
// config-time error: "run.yaml: train.precision bf16 with device: cpu (<device>):
// conv2d in bfloat16 is not supported by the cpu backend: ...".
std::string why_backend_cannot_train(const Config& config, Backend backend, std::string_view device);

// A precision named outside a config (`bigtrain bench-model --precision bf16`) as the
// compute type of the encoder's convolutions; a config's train.precision is one already.
DType precision_dtype(const std::string& precision);

}  // namespace bigtrain
