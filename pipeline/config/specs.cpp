#include "pipeline/config/specs.hpp"

#include <fmt/format.h>

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

net::ModelSpec model_spec(const Config& config) {
  const YAML::Node model = config.model.IsDefined() && !config.model.IsNull() ? config.model
                                                                              : YAML::Node(YAML::NodeType::Map);
  return net::model_spec_from_yaml(model, config.source);
}

std::vector<net::OpUse> training_ops(const Config& config) {
  return net::training_ops(model_spec(config), aggregator_spec(config.aggregator), config.train.optimizer,
                           config.train.precision);
}

std::string why_backend_cannot_train(const Config& config, Backend backend, std::string_view device) {
  const std::string why = net::why_backend_refuses(training_ops(config), backend);
  if (why.empty()) return why;
  return fmt::format("{}: train.precision {} with device: {} ({}): {}", config.source,
                     choice_name(config.train.precision), config.device.type, device, why);
}

DType precision_dtype(const std::string& precision) {
  const auto dtype = parse_choice<DType>(precision);
  BT_CHECK(dtype.has_value(), "precision '{}' is not one of fp32, bf16, fp16", precision);
  return *dtype;
}

}  // namespace bigtrain
