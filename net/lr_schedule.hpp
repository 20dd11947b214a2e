#pragma once
// Learning-rate schedules with the values of torch.optim.lr_scheduler, evaluated per
// optimizer step (the step count is the number of optimizer steps already taken, as
// PyTorch's `last_epoch` is when the scheduler is stepped after every optimizer.step()).
//
// A schedule is a pure function of (base learning rate, step): no hidden state, so a
// resumed run needs only its step count to continue on exactly the same curve, and
// param groups with different base rates share one schedule.
//
// Warm-up is PyTorch's SequentialLR([LinearLR(start_factor, 1.0, total_iters=W), main],
// milestones=[W]): steps 0..W-1 scale the base rate linearly from start_factor towards 1;
// from step W on the main schedule runs as if it started at step 0.
#include <cstdint>
#include <string>
#include <vector>

namespace YAML {
class Node;
}

namespace bigtrain::net {

enum class LrScheduleKind { constant, step, multistep, cosine };

struct LrScheduleConfig {
  LrScheduleKind kind = LrScheduleKind::constant;
  // step (StepLR): multiply by gamma every step_size steps.
  std::int64_t step_size = 1;
  // multistep (MultiStepLR): multiply by gamma at each milestone (sorted, ascending).
  std::vector<std::int64_t> milestones;
  double gamma = 0.1;
  // cosine (CosineAnnealingLR): half a cosine period from the base rate to eta_min over
  // t_max steps. Like PyTorch, the curve keeps going past t_max (it rises again), so set
  // t_max to the number of steps after warm-up.
  std::int64_t t_max = 1;
  double eta_min = 0.0;
  // Linear warm-up (LinearLR) over warmup_steps steps; 0 disables it. PyTorch's default
  // start factor is 1/3; 0 < warmup_start_factor <= 1 as LinearLR requires.
  std::int64_t warmup_steps = 0;
  double warmup_start_factor = 1.0 / 3.0;
};

const char* lr_schedule_kind_name(LrScheduleKind kind);
// Throws bigtrain::Error naming the valid kinds for an unknown name.
LrScheduleKind parse_lr_schedule_kind(const std::string& name);

class LrSchedule {
 public:
  // Throws bigtrain::Error for an inconsistent config (non-positive sizes, unsorted
  // milestones, a start factor outside (0, 1]).
  explicit LrSchedule(LrScheduleConfig config);

  // The learning rate for optimizer step `step` (0-based) of a group whose initial rate is base_lr.
  double learning_rate(double base_lr, std::int64_t step) const;
  const LrScheduleConfig& config() const { return config_; }

 private:
  double main_schedule(double base_lr, std::int64_t step) const;

  LrScheduleConfig config_;
};

// Reads a schedule from YAML, e.g.
//   {kind: cosine, t_max: 1000, eta_min: 0.0, warmup_steps: 100, warmup_start_factor: 0.01}
// Unknown keys are an error naming the line and the valid keys; `where` names the
// source (a file) in messages.
LrScheduleConfig lr_schedule_config_from_yaml(const YAML::Node& node, const std::string& where);

}  // namespace bigtrain::net
