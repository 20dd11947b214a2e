#include "net/optimizer.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kernels/core/error.hpp"
#include "kernels/optimizer_update.hpp"

namespace bigtrain::net {

namespace {

constexpr const char* kStepsTakenKey = "steps_taken";
constexpr const char* kParamStepSlot = "step";

Tensor scalar_i32(std::int64_t value) {
  BT_CHECK(value >= 0 && value <= INT32_MAX, "optimizer step count {} does not fit the int32 state tensor", value);
  Tensor tensor = Tensor::empty({1}, DType::i32);
  tensor.data<std::int32_t>()[0] = static_cast<std::int32_t>(value);
  return tensor;
}

// A non-negative count stored as int32 [1] (on any device); nullopt when malformed.
std::optional<std::int64_t> read_count(const Tensor& tensor) {
  if (!tensor.defined() || tensor.dtype() != DType::i32 || tensor.numel() != 1) return std::nullopt;
  const Tensor host = tensor.device().is_cpu() ? tensor : tensor.to(Device::cpu());
  const std::int32_t value = host.data<std::int32_t>()[0];
  if (value < 0) return std::nullopt;
  return value;
}

}  // namespace

std::vector<ParamGroup> split_decay_groups(const std::vector<Parameter*>& params) {
  ParamGroup decay, no_decay;
  no_decay.weight_decay = 0.0;
  for (Parameter* param : params) (param->value.rank() <= 1 ? no_decay : decay).params.push_back(param);
  std::vector<ParamGroup> groups;
  if (!decay.params.empty()) groups.push_back(std::move(decay));
  if (!no_decay.params.empty()) groups.push_back(std::move(no_decay));
  return groups;
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, double default_lr, double default_weight_decay, Backend backend)
    : groups_(std::move(groups)), backend_(backend) {
  BT_CHECK(!groups_.empty(), "optimizer: no parameter groups");
  std::set<std::string> names;
  std::set<const Parameter*> seen;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    ParamGroup& group = groups_[g];
    if (!group.lr) group.lr = default_lr;
    if (!group.weight_decay) group.weight_decay = default_weight_decay;
    BT_CHECK(*group.lr >= 0.0, "optimizer: group {} has learning rate {}, must be >= 0", g, *group.lr);
    BT_CHECK(*group.weight_decay >= 0.0, "optimizer: group {} has weight decay {}, must be >= 0", g,
             *group.weight_decay);
    group.initial_lr = *group.lr;
    for (const Parameter* param : group.params) {
      BT_CHECK(param != nullptr, "optimizer: group {} holds a null parameter", g);
      // State is keyed by name, so names must identify parameters, as in a state_dict.
      BT_CHECK(!param->name.empty(), "optimizer: a parameter of group {} has no name", g);
      BT_CHECK(seen.insert(param).second, "optimizer: parameter `{}` appears in more than one group (or twice)",
               param->name);
      BT_CHECK(names.insert(param->name).second, "optimizer: two parameters are named `{}`", param->name);
      BT_CHECK(param->value.dtype() == DType::f32, "optimizer: parameter `{}` is {}, only float32 is supported",
               param->name, dtype_name(param->value.dtype()));
    }
  }
}

double Optimizer::learning_rate(std::size_t index) const {
  const ParamGroup& group = groups_.at(index);
  return schedule_ ? schedule_->learning_rate(group.initial_lr, schedule_clock_.value_or(steps_taken_)) : *group.lr;
}

void Optimizer::set_learning_rate(double lr) {
  BT_CHECK(lr >= 0.0, "optimizer: learning rate {} must be >= 0", lr);
  for (ParamGroup& group : groups_) group.lr = lr;
}

void Optimizer::step() {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    ParamGroup& group = groups_[g];
    group.lr = learning_rate(g);
    for (Parameter* param : group.params) {
      if (!param->grad.defined()) continue;
      update(*param, state_[param->name], *group.lr, *group.weight_decay);
    }
  }
  ++steps_taken_;
}

void Optimizer::zero_grad() {
  for (ParamGroup& group : groups_)
    for (Parameter* param : group.params) param->zero_grad();
}

OptimizerState Optimizer::export_state() const {
  OptimizerState out;
  out.emplace(kStepsTakenKey, scalar_i32(steps_taken_));
  for (const auto& [name, state] : state_) {
    if (state.step == 0) continue;
    if (exports_param_step()) out.emplace(name + "." + kParamStepSlot, scalar_i32(state.step));
    for (const Slot& slot : state.slots) out.emplace(name + "." + slot.name, slot.value);
  }
  return out;
}

void Optimizer::import_state(const OptimizerState& state) {
  std::vector<std::string> problems;
  std::set<std::string> used;

  std::int64_t steps_taken = 0;
  if (auto it = state.find(kStepsTakenKey); it == state.end()) {
    problems.push_back(fmt::format("`{}` is missing", kStepsTakenKey));
  } else if (auto count = read_count(it->second)) {
    steps_taken = *count;
    used.insert(kStepsTakenKey);
  } else {
    problems.push_back(fmt::format("`{}` must be int32 [1] and >= 0, got {}", kStepsTakenKey, it->second.describe()));
    used.insert(kStepsTakenKey);
  }

  std::map<std::string, ParamState> imported;
  for (const ParamGroup& group : groups_) {
    for (const Parameter* param : group.params) {
      const std::string prefix = param->name + ".";
      ParamState param_state;
      if (exports_param_step()) {
        if (auto it = state.find(prefix + kParamStepSlot); it != state.end()) {
          used.insert(it->first);
          if (auto count = read_count(it->second); count && *count > 0)
            param_state.step = *count;
          else
            problems.push_back(fmt::format("`{}` must be int32 [1] and >= 1, got {}", it->first, it->second.describe()));
        }
      } else {
        // Without an exported step, any state at all means the parameter was updated.
        const auto first = state.lower_bound(prefix);
        if (first != state.end() && first->first.starts_with(prefix)) param_state.step = 1;
      }
      for (const std::string& slot_name : slot_names(param_state.step)) {
        const std::string key = prefix + slot_name;
        const auto it = state.find(key);
        if (it == state.end()) {
          problems.push_back(fmt::format("`{}` is missing", key));
          continue;
        }
        used.insert(key);
        const Tensor& source = it->second;
        if (source.dtype() != DType::f32 || source.shape() != param->value.shape()) {
          problems.push_back(fmt::format("`{}` is {}, expected float32{} as its parameter", key, source.describe(),
                                         shape_str(param->value.shape())));
          continue;
        }
        Tensor value = Tensor::empty(param->value.shape(), DType::f32, param->value.device());
        value.copy_from(source);
        param_state.slots.push_back({slot_name, std::move(value)});
      }
      if (param_state.step > 0) imported.emplace(param->name, std::move(param_state));
    }
  }
  std::vector<std::string> unknown;
  for (const auto& entry : state)
    if (!used.count(entry.first)) unknown.push_back(entry.first);
  if (!unknown.empty())
    problems.push_back(fmt::format("unknown tensors for a {} optimizer over these parameters: {}", kind(),
                                   fmt::join(unknown, ", ")));
  BT_CHECK(problems.empty(), "cannot import {} optimizer state: {}", kind(), fmt::join(problems, "; "));
  state_ = std::move(imported);
  steps_taken_ = steps_taken;
}

// ---- SGD ----------------------------------------------------------------------

Sgd::Sgd(std::vector<ParamGroup> groups, const SgdOptions& options, Backend backend)
    : Optimizer(std::move(groups), options.lr, options.weight_decay, backend), options_(options) {
  BT_CHECK(options.momentum >= 0.0, "sgd: momentum {} must be >= 0", options.momentum);
  BT_CHECK(!options.nesterov || (options.momentum > 0.0 && options.dampening == 0.0),
           "sgd: Nesterov momentum requires momentum > 0 and zero dampening (momentum {}, dampening {})",
           options.momentum, options.dampening);
}

std::vector<std::string> Sgd::slot_names(std::int64_t param_step) const {
  if (param_step == 0 || options_.momentum == 0.0) return {};
  return {"momentum_buffer"};
}

void Sgd::update(Parameter& param, ParamState& state, double lr, double weight_decay) {
  const kernels::SgdHyper hyper{.lr = static_cast<float>(lr),
                                .momentum = static_cast<float>(options_.momentum),
                                .dampening = static_cast<float>(options_.dampening),
                                .weight_decay = static_cast<float>(weight_decay),
                                .nesterov = options_.nesterov};
  const bool first_step = state.slots.empty();
  if (first_step && options_.momentum != 0.0)
    state.slots.push_back({"momentum_buffer", Tensor::empty(param.value.shape(), DType::f32, param.value.device())});
  Tensor none;
  Tensor& buffer = state.slots.empty() ? none : state.slots.front().value;
  kernels::sgd_update(backend(), hyper, first_step, param.value, param.grad, buffer);
  ++state.step;
}

// ---- AdamW --------------------------------------------------------------------

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options, Backend backend)
    : Optimizer(std::move(groups), options.lr, options.weight_decay, backend), options_(options) {
  BT_CHECK(options.epsilon >= 0.0, "adamw: epsilon {} must be >= 0", options.epsilon);
  BT_CHECK(options.beta1 >= 0.0 && options.beta1 < 1.0 && options.beta2 >= 0.0 && options.beta2 < 1.0,
           "adamw: betas ({}, {}) must lie in [0, 1)", options.beta1, options.beta2);
}

std::vector<std::string> AdamW::slot_names(std::int64_t param_step) const {
  if (param_step == 0) return {};
  return {"exp_avg", "exp_avg_sq"};
}

void AdamW::update(Parameter& param, ParamState& state, double lr, double weight_decay) {
  if (state.slots.empty()) {
    for (const char* name : {"exp_avg", "exp_avg_sq"})
      state.slots.push_back({name, Tensor::zeros(param.value.shape(), DType::f32, param.value.device())});
  }
  const kernels::AdamWHyper hyper{.lr = static_cast<float>(lr),
                                  .beta1 = static_cast<float>(options_.beta1),
                                  .beta2 = static_cast<float>(options_.beta2),
                                  .epsilon = static_cast<float>(options_.epsilon),
                                  .weight_decay = static_cast<float>(weight_decay)};
  ++state.step;
  kernels::adamw_update(backend(), hyper, state.step, param.value, param.grad, state.slots[0].value,
                        state.slots[1].value);
}

// ---- factory ------------------------------------------------------------------

const char* optimizer_kind_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::sgd: return "sgd";
    case OptimizerKind::adamw: return "adamw";
  }
  return "unknown";
}

OptimizerKind parse_optimizer_kind(const std::string& name) {
  if (name == "sgd") return OptimizerKind::sgd;
  if (name == "adamw") return OptimizerKind::adamw;
  throw Error(fmt::format("unknown optimizer '{}'; valid: sgd, adamw", name));
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, const std::vector<Parameter*>& params,
                                          Backend backend) {
  std::vector<ParamGroup> groups;
  if (config.decay_norm_and_bias) {
    ParamGroup all;
    all.params = params;
    groups.push_back(std::move(all));
  } else {
    groups = split_decay_groups(params);
  }
  return make_optimizer(config, std::move(groups), backend);
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::vector<ParamGroup> groups,
                                          Backend backend) {
  if (config.kind == OptimizerKind::sgd)
    return std::make_unique<Sgd>(std::move(groups),
                                 SgdOptions{.lr = config.lr,
                                            .momentum = config.momentum,
                                            .dampening = config.dampening,
                                            .weight_decay = config.weight_decay,
                                            .nesterov = config.nesterov},
                                 backend);
  if (config.kind == OptimizerKind::adamw)
    return std::make_unique<AdamW>(std::move(groups),
                                   AdamWOptions{.lr = config.lr,
                                                .beta1 = config.beta1,
                                                .beta2 = config.beta2,
                                                .epsilon = config.epsilon,
                                                .weight_decay = config.weight_decay},
                                   backend);
  throw Error(fmt::format("unknown optimizer kind {}", static_cast<int>(config.kind)));
}

}  // namespace bigtrain::net
