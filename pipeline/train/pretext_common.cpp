#include "pipeline/train/pretext_common.hpp"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "pipeline/common/random.hpp"

namespace bigtrain {

PretextPlan plan_pretext(const Config& config, std::size_t training_images) {
  const PretrainConfig& p = config.pretrain;
  BT_CHECK(p.epochs > 0, "pretraining: pretrain.epochs must be positive");
  BT_CHECK(training_images > 0, "pretraining: no training images");
  PretextPlan plan;
  plan.images = static_cast<std::int64_t>(training_images);
  plan.images_per_step = p.images_per_step > 0 ? p.images_per_step : config.train.images_per_step;
  plan.tile_batch = p.tile_batch > 0 ? p.tile_batch : config.train.tile_batch;
  plan.lr = p.lr > 0 ? p.lr : config.train.lr;
  plan.groups_per_epoch = (plan.images + plan.images_per_step - 1) / plan.images_per_step;
  return plan;
}

std::unique_ptr<net::Optimizer> make_pretext_optimizer(const Config& config, const PretextPlan& plan,
                                                       const std::vector<net::Parameter*>& params, Backend backend) {
  net::OptimizerConfig optimizer_config;
  optimizer_config.kind = config.train.optimizer;
  optimizer_config.lr = plan.lr;
  optimizer_config.weight_decay = config.train.weight_decay;
  optimizer_config.momentum = config.train.momentum;
  optimizer_config.decay_norm_and_bias = false;
  auto optimizer = net::make_optimizer(optimizer_config, params, backend);
  net::LrScheduleConfig schedule;
  schedule.kind = net::LrScheduleKind::cosine;
  schedule.warmup_steps = config.train.warmup_steps;
  schedule.t_max =
      std::max<std::int64_t>(1, plan.groups_per_epoch * config.pretrain.epochs - config.train.warmup_steps);
  optimizer->set_schedule(net::LrSchedule(schedule));
  return optimizer;
}

std::vector<StreamJob> pretext_epoch_jobs(std::size_t training_images, std::uint64_t order_seed) {
  std::vector<std::size_t> order(training_images);
  std::iota(order.begin(), order.end(), std::size_t{0});
  SplitMix64 order_rng(order_seed);
  seeded_shuffle(order, order_rng);
  std::vector<StreamJob> jobs;
  jobs.reserve(order.size());
  for (std::size_t image : order) jobs.push_back({image, 1});
  return jobs;
}

Preprocessing pretext_preprocessing(const Config& config, int channels) {
  Config pretext = config;
  pretext.data.normalize = config.pretrain.normalize;
  return Preprocessing::from_config(pretext, channels, true);
}

void throw_pretext_interrupted(std::int64_t epoch, std::int64_t epochs) {
  throw Error(fmt::format("interrupted during pretraining (epoch {} of {}); nothing of it was kept, and no "
                          "checkpoint exists yet: start the run again",
                          epoch, epochs));
}

}  // namespace bigtrain
