// Learning-rate schedules against torch.optim.lr_scheduler (the values an SGD
// optimizer's param groups actually carry at each step), plus config validation.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <cmath>
#include <string>

#include "kernels/core/error.hpp"
#include "net/lr_schedule.hpp"
#include "tests/net/optimizer_torch_oracle.hpp"

namespace bigtrain::net {
namespace {

constexpr std::int64_t kSteps = 40;
constexpr double kBaseRates[] = {0.1, 0.025};  // two param groups with different initial rates

// The PyTorch scheduler expression for a config; `optimizer` is the name in the script.
std::string torch_main_scheduler(const LrScheduleConfig& c) {
  switch (c.kind) {
    case LrScheduleKind::constant:
      return "S.LambdaLR(optimizer, lambda step: 1.0)";
    case LrScheduleKind::step:
      return fmt::format("S.StepLR(optimizer, step_size={}, gamma={})", c.step_size, c.gamma);
    case LrScheduleKind::multistep:
      return fmt::format("S.MultiStepLR(optimizer, milestones=[{}], gamma={})", fmt::join(c.milestones, ", "), c.gamma);
    case LrScheduleKind::cosine:
      return fmt::format("S.CosineAnnealingLR(optimizer, T_max={}, eta_min={})", c.t_max, c.eta_min);
  }
  return "";
}

// PyTorch's rates for kSteps optimizer steps, group after group within each step.
std::vector<double> torch_rates(const LrScheduleConfig& c) {
  std::string scheduler = torch_main_scheduler(c);
  if (c.warmup_steps > 0)
    scheduler = fmt::format(
        "S.SequentialLR(optimizer, [S.LinearLR(optimizer, start_factor={}, end_factor=1.0, total_iters={}), {}], "
        "milestones=[{}])",
        c.warmup_start_factor, c.warmup_steps, scheduler, c.warmup_steps);
  const std::string script = fmt::format(R"(
import warnings
warnings.filterwarnings("ignore")
import torch
import torch.optim.lr_scheduler as S
params = [torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))]
optimizer = torch.optim.SGD([{{"params": [params[0]], "lr": {}}}, {{"params": [params[1]], "lr": {}}}], lr=1.0)
scheduler = {}
for step in range({}):
    print(" ".join(repr(g["lr"]) for g in optimizer.param_groups))
    optimizer.step()
    scheduler.step()
)",
                                         kBaseRates[0], kBaseRates[1], scheduler, kSteps);
  return testing::parse_numbers(testing::run_torch_script(script));
}

void expect_matches_torch(const LrScheduleConfig& config) {
  if (auto reason = testing::torch_unavailable_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const LrSchedule schedule(config);
  const auto expected = torch_rates(config);
  ASSERT_EQ(expected.size(), static_cast<std::size_t>(kSteps) * 2);
  for (std::int64_t step = 0; step < kSteps; ++step) {
    for (int group = 0; group < 2; ++group) {
      const double want = expected[static_cast<std::size_t>(step * 2 + group)];
      // PyTorch updates most schedules recursively (lr_t from lr_{t-1}); we use the closed
      // forms. The two differ by accumulated double rounding, ~1e-16 of the base rate per
      // step, so 1e-12 of the base rate is far above that and far below any real error.
      EXPECT_NEAR(schedule.learning_rate(kBaseRates[group], step), want, 1e-12 * kBaseRates[group])
          << lr_schedule_kind_name(config.kind) << " step " << step << " group " << group;
    }
  }
}

TEST(LrSchedule, ConstantMatchesTorch) { expect_matches_torch({}); }

TEST(LrSchedule, ConstantWithWarmupMatchesTorch) {
  LrScheduleConfig c;
  c.warmup_steps = 5;
  c.warmup_start_factor = 0.01;
  expect_matches_torch(c);
}

TEST(LrSchedule, StepWithWarmupMatchesTorch) {
  LrScheduleConfig c;
  c.kind = LrScheduleKind::step;
  c.step_size = 3;
  c.gamma = 0.5;
  c.warmup_steps = 4;
  c.warmup_start_factor = 0.1;
  expect_matches_torch(c);
}

TEST(LrSchedule, MultiStepMatchesTorch) {
  LrScheduleConfig c;
  c.kind = LrScheduleKind::multistep;
  c.milestones = {3, 10, 10, 25};  // a repeated milestone decays twice, as in MultiStepLR
  c.gamma = 0.2;
  expect_matches_torch(c);
}

TEST(LrSchedule, CosineMatchesTorchIncludingPastTMax) {
  LrScheduleConfig c;
  c.kind = LrScheduleKind::cosine;
  c.t_max = 12;  // 40 steps run through more than one period
  c.eta_min = 0.001;
  expect_matches_torch(c);
}

TEST(LrSchedule, CosineWithWarmupMatchesTorch) {
  LrScheduleConfig c;
  c.kind = LrScheduleKind::cosine;
  c.t_max = 30;
  c.warmup_steps = 10;  // PyTorch's default start factor 1/3
  expect_matches_torch(c);
}

// Independent of torch: the shape of the curves, so the tests above cannot pass by
// comparing two equally wrong values.
TEST(LrSchedule, CurveLandmarks) {
  LrScheduleConfig c;
  c.kind = LrScheduleKind::cosine;
  c.t_max = 100;
  c.eta_min = 0.0;
  c.warmup_steps = 10;
  c.warmup_start_factor = 0.1;
  const LrSchedule schedule(c);
  EXPECT_DOUBLE_EQ(schedule.learning_rate(1.0, 0), 0.1);
  EXPECT_DOUBLE_EQ(schedule.learning_rate(1.0, 5), 0.55);  // halfway through warm-up
  EXPECT_DOUBLE_EQ(schedule.learning_rate(1.0, 10), 1.0);  // the main schedule starts at the base rate
  EXPECT_NEAR(schedule.learning_rate(1.0, 60), 0.5, 1e-15);  // half of t_max: cos(pi/2) = 0
  EXPECT_NEAR(schedule.learning_rate(1.0, 110), 0.0, 1e-15);
}

TEST(LrSchedule, RejectsInconsistentConfigs) {
  LrScheduleConfig c;
  c.kind = LrScheduleKind::multistep;
  c.milestones = {10, 5};
  EXPECT_THROW(LrSchedule{c}, Error);
  c = {};
  c.kind = LrScheduleKind::step;
  c.step_size = 0;
  EXPECT_THROW(LrSchedule{c}, Error);
  c = {};
  c.warmup_steps = 3;
  c.warmup_start_factor = 0.0;
  EXPECT_THROW(LrSchedule{c}, Error);
  EXPECT_THROW(parse_lr_schedule_kind("linear"), Error);
}

TEST(LrSchedule, ReadsYamlAndNamesUnknownKeys) {
  const auto config = lr_schedule_config_from_yaml(
      YAML::Load("{kind: multistep, milestones: [2, 4], gamma: 0.5, warmup_steps: 1}"), "train.yaml");
  EXPECT_EQ(config.kind, LrScheduleKind::multistep);
  EXPECT_EQ(config.milestones, (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(config.warmup_steps, 1);
  try {
    lr_schedule_config_from_yaml(YAML::Load("kind: cosine\nt_maxx: 3\n"), "train.yaml");
    FAIL() << "an unknown key was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("train.yaml:2"), std::string::npos) << message;
    EXPECT_NE(message.find("t_maxx"), std::string::npos) << message;
    EXPECT_NE(message.find("t_max"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace bigtrain::net
