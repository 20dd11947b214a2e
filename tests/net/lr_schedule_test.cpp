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

std::string torch_scheduler(const LrScheduleConfig& c) {
  const std::string main = torch_main_scheduler(c);
  if (c.warmup_steps == 0) return main;
  return fmt::format(
      "S.SequentialLR(optimizer, [S.LinearLR(optimizer, start_factor={}, end_factor=1.0, total_iters={}), {}], "
      "milestones=[{}])",
      c.warmup_start_factor, c.warmup_steps, main, c.warmup_steps);
}

// The configurations compared with PyTorch, each with its name.
std::vector<std::pair<std::string, LrScheduleConfig>> torch_cases() {
  std::vector<std::pair<std::string, LrScheduleConfig>> cases;
  cases.emplace_back("constant", LrScheduleConfig{});
  LrScheduleConfig c;
  c.warmup_steps = 5;
  c.warmup_start_factor = 0.01;
  cases.emplace_back("constant with warm-up", c);
  c = {};
  c.kind = LrScheduleKind::step;
  c.step_size = 3;
  c.gamma = 0.5;
  c.warmup_steps = 4;
  c.warmup_start_factor = 0.1;
  cases.emplace_back("step with warm-up", c);
  c = {};
  c.kind = LrScheduleKind::multistep;
  c.milestones = {3, 10, 10, 25};  // a repeated milestone decays twice, as in MultiStepLR
  c.gamma = 0.2;
  cases.emplace_back("multistep", c);
  c = {};
  c.kind = LrScheduleKind::cosine;
  c.t_max = 12;  // 40 steps run through more than one period
  c.eta_min = 0.001;
  cases.emplace_back("cosine past t_max", c);
  c = {};
  c.kind = LrScheduleKind::cosine;
  c.t_max = 30;
  c.warmup_steps = 10;  // PyTorch's default start factor 1/3
  cases.emplace_back("cosine with warm-up", c);
  return cases;
}

// One PyTorch run for every case (importing torch dominates the test's time): for each
// case, kSteps lines of the param groups' rates, as an SGD optimizer carries them.
std::vector<double> torch_rates(const std::vector<std::pair<std::string, LrScheduleConfig>>& cases) {
  std::string schedulers;
  for (const auto& entry : cases) schedulers += "    lambda optimizer: " + torch_scheduler(entry.second) + ",\n";
  const std::string script = fmt::format(R"(
import warnings
warnings.filterwarnings("ignore")
import torch
import torch.optim.lr_scheduler as S
schedulers = [
{}]
for make in schedulers:
    params = [torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))]
    optimizer = torch.optim.SGD([{{"params": [params[0]], "lr": {}}}, {{"params": [params[1]], "lr": {}}}], lr=1.0)
    scheduler = make(optimizer)
    for step in range({}):
        print(" ".join(repr(g["lr"]) for g in optimizer.param_groups))
        optimizer.step()
        scheduler.step()
)",
                                         schedulers, kBaseRates[0], kBaseRates[1], kSteps);
  return testing::parse_numbers(testing::run_torch_script(script));
}

TEST(LrSchedule, EveryKindMatchesTorch) {
  if (auto reason = testing::torch_unavailable_reason(); !reason.empty()) GTEST_SKIP() << reason;
  const auto cases = torch_cases();
  const auto expected = torch_rates(cases);
  ASSERT_EQ(expected.size(), cases.size() * kSteps * 2);
  std::size_t index = 0;
  for (const auto& [name, config] : cases) {
    const LrSchedule schedule(config);
    for (std::int64_t step = 0; step < kSteps; ++step) {
      for (int group = 0; group < 2; ++group) {
        // PyTorch updates most schedules recursively (lr_t from lr_{t-1}); we use the closed
        // forms. The two differ by accumulated double rounding, ~1e-16 of the base rate per
        // step, so 1e-12 of the base rate is far above that and far below any real error.
        EXPECT_NEAR(schedule.learning_rate(kBaseRates[group], step), expected[index++], 1e-12 * kBaseRates[group])
            << name << ", step " << step << ", group " << group;
      }
    }
  }
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
