#pragma once
// Optimizers with torch.optim's semantics: SGD (momentum, dampening, Nesterov, L2
// weight decay) and AdamW (decoupled weight decay), over param groups that may
// override the learning rate and weight decay, as PyTorch's do.
//
// Each step updates every parameter whose gradient is defined (PyTorch skips a None
// grad) with one fused kernel call (kernels/optimizer_update.hpp), so the CUDA
// backend runs one kernel per tensor. Per-parameter state (momentum buffers, Adam
// moments and step counts) lives on the parameter's device and is exported and
// imported as named tensors, so a run resumes bit for bit from a checkpoint.
//
// With a schedule attached, step() first sets every group's rate to
// schedule.learning_rate(group.initial_lr, steps_taken()), which is what PyTorch's
// `optimizer.step(); scheduler.step()` loop gives; steps_taken() is part of the
// exported state, so a resumed run continues on the same curve.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/core/tensor.hpp"
#include "net/lr_schedule.hpp"
#include "net/parameter.hpp"

namespace bigtrain::net {

struct ParamGroup {
  std::vector<Parameter*> params;
  // Unset: the optimizer's default, as a PyTorch param group without the key.
  std::optional<double> lr;
  std::optional<double> weight_decay;
  // The base rate schedules scale (PyTorch's `initial_lr`); filled in by the optimizer.
  double initial_lr = 0.0;
};

// Two groups, the usual recipe for ResNets: weight decay for convolution and linear
// weights, none for biases and BatchNorm weights and biases (every tensor of rank <= 1).
// Empty groups are left out.
std::vector<ParamGroup> split_decay_groups(const std::vector<Parameter*>& params);

// Named optimizer state. Tensors share storage with the optimizer: write them out (or
// clone them) before the next step.
using OptimizerState = std::map<std::string, Tensor>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter with a defined gradient.
  void step();
  // Zeroes every gradient (allocating it where undefined): call before accumulating
  // the gradients of the next step.
  void zero_grad();

  // Rates of later steps come from the schedule; without one, each group keeps its rate.
  void set_schedule(std::optional<LrSchedule> schedule) { schedule_ = std::move(schedule); }
  // The position the schedule reads instead of steps_taken(), for a trainer whose
  // schedule counts something coarser than updates (train.step_every_batch counts
  // groups of images); unset: steps_taken(). Not part of the exported state.
  void set_schedule_clock(std::optional<std::int64_t> position) { schedule_clock_ = position; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // The rate the next step() uses for group `index` (after the schedule, if any).
  double learning_rate(std::size_t index) const;
  void set_learning_rate(double lr);  // every group; for runs without a schedule
  std::int64_t steps_taken() const { return steps_taken_; }
  Backend backend() const { return backend_; }
  virtual const char* kind() const = 0;

  // "<parameter name>.<state>" for every parameter that has state, plus "steps_taken"
  // (int32 [1]). Parameters that never had a gradient have no state, as in PyTorch.
  OptimizerState export_state() const;
  // Copies state into this optimizer (onto the parameters' device). Throws
  // bigtrain::Error listing unknown, missing or mis-shaped tensors; the optimizer is
  // unchanged when it throws.
  void import_state(const OptimizerState& state);

 protected:
  Optimizer(std::vector<ParamGroup> groups, double default_lr, double default_weight_decay, Backend backend);

  struct Slot {
    std::string name;  // e.g. "exp_avg"
    Tensor value;      // float32, the parameter's shape and device
  };
  struct ParamState {
    std::int64_t step = 0;  // updates applied to this parameter
    std::vector<Slot> slots;
  };
  // Updates one parameter; creates its slots on its first update.
  virtual void update(Parameter& param, ParamState& state, double lr, double weight_decay) = 0;
  // The slot names an imported parameter state must have (given its step count).
  virtual std::vector<std::string> slot_names(std::int64_t param_step) const = 0;
  // Whether the exported state includes the per-parameter step (AdamW needs it for bias correction).
  virtual bool exports_param_step() const = 0;

 private:
  std::vector<ParamGroup> groups_;
  std::map<std::string, ParamState> state_;  // by parameter name
  std::optional<LrSchedule> schedule_;
  std::optional<std::int64_t> schedule_clock_;
  std::int64_t steps_taken_ = 0;
  Backend backend_;
};

struct SgdOptions {
  double lr = 0.1;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;  // L2: added to the gradient before momentum
  bool nesterov = false;
};

class Sgd final : public Optimizer {
 public:
  // Throws bigtrain::Error for the settings torch.optim.SGD rejects.
  Sgd(std::vector<ParamGroup> groups, const SgdOptions& options, Backend backend);
  const char* kind() const override { return "sgd"; }

 private:
  void update(Parameter& param, ParamState& state, double lr, double weight_decay) override;
  std::vector<std::string> slot_names(std::int64_t param_step) const override;
  bool exports_param_step() const override { return false; }

  SgdOptions options_;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p *= 1 - lr * weight_decay
};

class AdamW final : public Optimizer {
 public:
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options, Backend backend);
  const char* kind() const override { return "adamw"; }

 private:
  void update(Parameter& param, ParamState& state, double lr, double weight_decay) override;
  std::vector<std::string> slot_names(std::int64_t param_step) const override;
  bool exports_param_step() const override { return true; }

  AdamWOptions options_;
};

enum class OptimizerKind : std::uint8_t { sgd, adamw };
const char* optimizer_kind_name(OptimizerKind kind);
// Throws bigtrain::Error naming the valid kinds for an unknown name.
OptimizerKind parse_optimizer_kind(const std::string& name);

// What a run config names; make_optimizer builds it.
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adamw;
  double lr = 1e-3;
  double weight_decay = 0.0;
  bool decay_norm_and_bias = true;  // false: split_decay_groups
  // sgd
  double momentum = 0.9;
  double dampening = 0.0;
  bool nesterov = false;
  // adamw
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
};
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, const std::vector<Parameter*>& params,
                                          Backend backend);
// The same over groups of the caller's (config.decay_norm_and_bias is then the caller's to apply).
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& config, std::vector<ParamGroup> groups,
                                          Backend backend);

}  // namespace bigtrain::net
