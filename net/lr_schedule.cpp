#include "net/lr_schedule.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include "kernels/core/error.hpp"

namespace bigtrain::net {

namespace {

constexpr std::array<std::pair<LrScheduleKind, const char*>, 4> kKindNames{{
    {LrScheduleKind::constant, "constant"},
    {LrScheduleKind::step, "step"},
    {LrScheduleKind::multistep, "multistep"},
    {LrScheduleKind::cosine, "cosine"},
}};

std::int64_t count_milestones_passed(const std::vector<std::int64_t>& milestones, std::int64_t step) {
  // bisect_right, as MultiStepLR: the decay applies from the milestone step itself.
  return std::upper_bound(milestones.begin(), milestones.end(), step) - milestones.begin();
}

}  // namespace

const char* lr_schedule_kind_name(LrScheduleKind kind) {
  for (const auto& [k, name] : kKindNames)
    if (k == kind) return name;
  return "unknown";
}

LrScheduleKind parse_lr_schedule_kind(const std::string& name) {
  for (const auto& [kind, kind_name] : kKindNames)
    if (name == kind_name) return kind;
  std::vector<std::string> valid;
  for (const auto& entry : kKindNames) valid.emplace_back(entry.second);
  throw Error(fmt::format("unknown learning-rate schedule '{}'; valid: {}", name, fmt::join(valid, ", ")));
}

LrSchedule::LrSchedule(LrScheduleConfig config) : config_(std::move(config)) {
  BT_CHECK(config_.warmup_steps >= 0, "lr schedule: warmup_steps must be >= 0, got {}", config_.warmup_steps);
  if (config_.warmup_steps > 0)
    BT_CHECK(config_.warmup_start_factor > 0.0 && config_.warmup_start_factor <= 1.0,
             "lr schedule: warmup_start_factor must be in (0, 1], got {}", config_.warmup_start_factor);
  switch (config_.kind) {
    case LrScheduleKind::constant:
      break;
    case LrScheduleKind::step:
      BT_CHECK(config_.step_size > 0, "lr schedule 'step': step_size must be > 0, got {}", config_.step_size);
      break;
    case LrScheduleKind::multistep:
      BT_CHECK(std::is_sorted(config_.milestones.begin(), config_.milestones.end()),
               "lr schedule 'multistep': milestones must be ascending, got [{}]", fmt::join(config_.milestones, ", "));
      break;
    case LrScheduleKind::cosine:
      BT_CHECK(config_.t_max > 0, "lr schedule 'cosine': t_max must be > 0, got {}", config_.t_max);
      break;
  }
}

double LrSchedule::main_schedule(double base_lr, std::int64_t step) const {
  switch (config_.kind) {
    case LrScheduleKind::constant:
      return base_lr;
    case LrScheduleKind::step:
      return base_lr * std::pow(config_.gamma, static_cast<double>(step / config_.step_size));
    case LrScheduleKind::multistep:
      return base_lr * std::pow(config_.gamma, static_cast<double>(count_milestones_passed(config_.milestones, step)));
    case LrScheduleKind::cosine: {
      // CosineAnnealingLR's closed form; its recursive form differs only by rounding.
      const double phase = std::numbers::pi * static_cast<double>(step) / static_cast<double>(config_.t_max);
      return config_.eta_min + (base_lr - config_.eta_min) * (1.0 + std::cos(phase)) / 2.0;
    }
  }
  return base_lr;
}

double LrSchedule::learning_rate(double base_lr, std::int64_t step) const {
  BT_CHECK(step >= 0, "lr schedule: step must be >= 0, got {}", step);
  if (step < config_.warmup_steps) {
    const double progress = static_cast<double>(step) / static_cast<double>(config_.warmup_steps);
    const double factor = config_.warmup_start_factor + (1.0 - config_.warmup_start_factor) * progress;
    return base_lr * factor;
  }
  return main_schedule(base_lr, step - config_.warmup_steps);
}

LrScheduleConfig lr_schedule_config_from_yaml(const YAML::Node& node, const std::string& where) {
  static const std::set<std::string> kKeys{"kind",  "step_size", "milestones",   "gamma",
                                           "t_max", "eta_min",   "warmup_steps", "warmup_start_factor"};
  auto location = [&](const YAML::Node& n) { return fmt::format("{}:{}", where, n.Mark().line + 1); };
  BT_CHECK(node.IsMap(), "{}: the learning-rate schedule must be a mapping", location(node));
  LrScheduleConfig config;
  for (const auto& entry : node) {
    const auto key = entry.first.as<std::string>();
    BT_CHECK(kKeys.count(key), "{}: unknown key '{}' in the learning-rate schedule; valid keys: {}",
             location(entry.first), key, fmt::join(kKeys, ", "));
    const YAML::Node& value = entry.second;
    try {
      if (key == "kind") config.kind = parse_lr_schedule_kind(value.as<std::string>());
      else if (key == "step_size") config.step_size = value.as<std::int64_t>();
      else if (key == "milestones") config.milestones = value.as<std::vector<std::int64_t>>();
      else if (key == "gamma") config.gamma = value.as<double>();
      else if (key == "t_max") config.t_max = value.as<std::int64_t>();
      else if (key == "eta_min") config.eta_min = value.as<double>();
      else if (key == "warmup_steps") config.warmup_steps = value.as<std::int64_t>();
      else if (key == "warmup_start_factor") config.warmup_start_factor = value.as<double>();
    } catch (const YAML::Exception& e) {
      throw Error(fmt::format("{}: bad value for '{}' in the learning-rate schedule: {}", location(value), key, e.msg));
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", location(value), e.what()));
    }
  }
  try {
    LrSchedule validate(config);  // an inconsistent combination is an error now, not at step 0
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", location(node), e.what()));
  }
  return config;
}

}  // namespace bigtrain::net
