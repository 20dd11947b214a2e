#include "pipeline/config/specs.hpp"

namespace bigtrain {

net::AggregatorSpec aggregator_spec(const AggregatorConfig& config) {
  net::AggregatorSpec spec;
  spec.kind = net::parse_aggregator_kind(config.kind);
  spec.hidden = config.hidden;
  spec.gated = config.gated;
  spec.dropout = static_cast<float>(config.dropout);
  return spec;
}

DType precision_dtype(const std::string& precision) {
  if (precision == "bf16") return DType::bf16;
  if (precision == "fp16") return DType::f16;
  return DType::f32;
}

}  // namespace bigtrain
