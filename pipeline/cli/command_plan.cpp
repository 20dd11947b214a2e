// `bigtrain plan CONFIG [--image WxH|IMAGE] [--memory 2GiB] [--device cpu|cuda] [--json]`:
// memory and FLOPs of the configured run before running it (pipeline/plan/plan.hpp).
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "pipeline/cli/command_registry.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/config/specs.hpp"
#include "pipeline/plan/plan.hpp"
#include "pipeline/plan/plan_units.hpp"
#include "pipeline/plan/recompute_split.hpp"
#include "tiler/image_source.hpp"

namespace bigtrain::cli {
namespace {

struct PlanArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::string image;
  std::string memory;
  std::string device;
  bool json = false;
};

// The config's device.type, unless --device says otherwise. `auto` plans for the GPU
// when the config may run on one: a plan is mostly asked "does it fit my GPU", and
// needs no GPU to answer.
Backend planned_backend(const std::string& choice) {
  if (choice == "cpu") return Backend::cpu;
  if (choice == "cuda" || choice == "auto") return Backend::cuda;
  throw Error(fmt::format("--device '{}' is not cpu, cuda or auto", choice));
}

// A plan of a run its backend cannot train is an error, as the run would be: asked
// of the backend table before anything is built. A build without the CUDA backend
// has no table to ask, yet still plans the GPU's memory (no GPU is needed for that).
void require_backend_can_train(const Config& config, Backend backend, const std::string& device) {
#ifndef BIGTRAIN_HAVE_CUDA
  if (backend == Backend::cuda) {
    spdlog::warn("this build has no CUDA backend: the plan cannot check that cuda runs every op of {}",
                 config.source);
    return;
  }
#endif
  if (const std::string why = why_backend_cannot_train(config, backend, fmt::format("planned for {}", device));
      !why.empty())
    throw Error(why);
}

int run(const PlanArgs& args) {
  const Config config = load_config(args.config, args.overrides);
  const std::string device = args.device.empty() ? config.device.type : args.device;
  const Backend backend = planned_backend(device);
  require_backend_can_train(config, backend, device);
  PlanInputs inputs = plan_inputs_from_config(config, backend);
  if (!args.image.empty()) {
    if (looks_like_image_size(args.image)) {
      const auto [width, height] = parse_image_size(args.image);
      inputs.image_width = width, inputs.image_height = height;
    } else {
      // A file: its size at the configured level, read from the header only.
      const auto source = tiler::open_image(args.image);
      const auto& levels = source->info().levels;
      const std::size_t level = static_cast<std::size_t>(config.tiler.level);
      BT_CHECK(level < levels.size(), "{}: tiler.level {} does not exist (the image has {} level(s))", args.image,
               level, levels.size());
      inputs.image_width = levels[level].width, inputs.image_height = levels[level].height;
    }
  }
  std::optional<std::size_t> budget;
  if (!args.memory.empty()) budget = parse_memory_size(args.memory);
  const TrainingPlan plan = plan_training(inputs, budget);
  // The recompute split under --memory when given, else under train.memory_budget.
  std::string source = "--memory";
  const std::size_t recompute_budget = budget ? *budget : resolve_memory_budget(config, backend, &source);
  RecomputeSplit split = recompute_split(plan, recompute_budget);
  split.budget_source = source;
  if (args.json) {
    nlohmann::json out = to_json(plan);
    out["recompute"] = to_json(plan, split);
    fmt::print("{}\n", out.dump(2));
  } else {
    fmt::print("{}{}", format_plan(plan), format_recompute_split(plan, split));
  }
  return 0;
}

RegisterCommand plan_command("plan", [](CLI::App& app) {
  app.description(
      "Predict per-layer shapes, parameters, FLOPs and the peak memory of a training step for a config, the peak of "
      "whole-image training, and the largest tile batch and tile that fit a memory budget");
  auto args = std::make_shared<PlanArgs>();
  app.add_option("CONFIG", args->config, "run configuration (YAML)")->required()->check(CLI::ExistingFile);
  app.add_option("--set", args->overrides, "override a config key, e.g. --set train.tile_batch=8 (repeatable)");
  app.add_option("--image", args->image,
                 "image size WIDTHxHEIGHT at the configured level (before tiler.downsample), or an image file whose "
                 "header gives it");
  app.add_option("--memory", args->memory, "memory budget, e.g. 2GiB, 512MiB, 16GB");
  app.add_option("--device", args->device,
                 "plan the memory of cpu or cuda (default: the config's device.type; auto plans for cuda)")
      ->check(CLI::IsMember({"cpu", "cuda", "auto"}));
  app.add_flag("--json", args->json, "print the plan as JSON");
  return std::function<int()>([args] { return run(*args); });
});

}  // namespace
}  // namespace bigtrain::cli
