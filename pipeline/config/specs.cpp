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

}  // namespace bigtrain
