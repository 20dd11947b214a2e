#include "pipeline/config/specs.hpp"

#include "kernels/core/error.hpp"

namespace bigtrain {

net::AggregatorSpec aggregator_spec(const AggregatorConfig& config) {
  net::AggregatorSpec spec;
  spec.kind = config.kind;
  spec.hidden = config.hidden;
  spec.gated = config.gated;
  spec.dropout = static_cast<float>(config.dropout);
  return spec;
}

DType precision_dtype(const std::string& precision) {
  const auto dtype = parse_choice<DType>(precision);
  BT_CHECK(dtype.has_value(), "precision '{}' is not one of fp32, bf16, fp16", precision);
  return *dtype;
}

}  // namespace bigtrain
