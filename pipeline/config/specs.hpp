#pragma once
// Typed specs from a validated config: where a config's choices (strings in YAML,
// checked by the reader) become the enums and structs of the layers below, once.
// Trainer, `bigtrain plan` and checkpoints consume these instead of comparing strings.
#include <string>

#include "kernels/core/device.hpp"
#include "net/aggregator.hpp"
#include "pipeline/config/config.hpp"

namespace bigtrain {

net::AggregatorSpec aggregator_spec(const AggregatorConfig& config);

// A precision named outside a config (`bigtrain bench-model --precision bf16`) as the
// compute type of the encoder's convolutions; a config's train.precision is one already.
DType precision_dtype(const std::string& precision);

}  // namespace bigtrain
