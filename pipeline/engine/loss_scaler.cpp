#include "pipeline/engine/loss_scaler.hpp"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/core/error.hpp"

namespace bigtrain {

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options), scale_(options.init_scale) {
  BT_CHECK(options.init_scale > 0 && std::isfinite(options.init_scale), "loss scaler: initial scale {} must be positive",
           options.init_scale);
  BT_CHECK(options.growth_factor > 1.0, "loss scaler: growth factor {} must exceed 1", options.growth_factor);
  BT_CHECK(options.backoff_factor > 0.0 && options.backoff_factor < 1.0,
           "loss scaler: backoff factor {} must lie in (0, 1)", options.backoff_factor);
  BT_CHECK(options.growth_interval >= 1, "loss scaler: growth interval {} must be positive", options.growth_interval);
}

bool LossScaler::update(bool found_non_finite) {
  if (!enabled()) return true;
  if (found_non_finite) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
    return false;
  }
  if (++growth_tracker_ == options_.growth_interval) {
    // GradScaler keeps the old scale when growing would overflow float32.
    if (std::isfinite(static_cast<float>(scale_ * options_.growth_factor))) scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  return true;
}

std::string LossScaler::to_json() const {
  // %.17g: the double reads back to the same bits.
  return nlohmann::json{{"scale", scale_}, {"growth_tracker", growth_tracker_}}.dump();
}

void LossScaler::restore(const std::string& json, const std::string& source) {
  try {
    const nlohmann::json state = nlohmann::json::parse(json);
    const double scale = state.at("scale").get<double>();
    const auto tracker = state.at("growth_tracker").get<std::int64_t>();
    BT_CHECK(scale > 0 && std::isfinite(scale) && tracker >= 0, "{}: the saved loss scale {} (growth tracker {}) is invalid",
             source, scale, tracker);
    scale_ = scale;
    growth_tracker_ = tracker;
  } catch (const nlohmann::json::exception& error) {
    throw Error(fmt::format("{}: the saved loss scaler state is unreadable: {}", source, error.what()));
  }
}

}  // namespace bigtrain
