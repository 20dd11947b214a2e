// `bigtrain init DATA [--out config.yaml] [--memory 2GiB] [--device cpu|cuda]`: a
// commented config for a dataset, from a look at its images (pipeline/cli/init_config.hpp).
#include <filesystem>

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "pipeline/common/atomic_file.hpp"
#include "pipeline/cli/command_registry.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/cli/init_config.hpp"
#include "pipeline/plan/plan_units.hpp"

namespace bigtrain::cli {
namespace {

struct InitArgs {
  InitOptions options;
  std::string memory;
  bool force = false;
};

int run(InitArgs& args) {
  if (!args.memory.empty()) args.options.memory = parse_memory_size(args.memory);
  if (std::filesystem::exists(args.options.out) && !args.force)
    throw Error(fmt::format("{} exists; give another --out, or --force to replace it", args.options.out));
  const InitResult result = init_config(args.options);
  if (!result.problems.empty()) {
    fmt::print(stderr, "{}: {} problem(s) to fix before training:\n", args.options.data, result.problems.size());
    for (const auto& problem : result.problems) fmt::print(stderr, "  {}\n", problem);
    fmt::print(stderr, "no config written\n");
    return 1;
  }
  // The config must run as written: read it back the way `bigtrain run` will.
  const std::string out_dir = std::filesystem::absolute(args.options.out).parent_path().string();
  const std::string temporary = temporary_path_for(args.options.out);
  write_file_atomically(temporary, result.yaml);
  try {
    (void)load_config(temporary);
  } catch (...) {
    std::filesystem::remove(temporary);
    throw;
  }
  commit_temporary(temporary, args.options.out);
  for (const auto& decision : result.decisions) fmt::print("{}\n", decision);
  fmt::print("wrote {} (in {}); next: bigtrain plan {} --memory {}, then bigtrain run {}\n", args.options.out, out_dir,
             args.options.out, args.memory.empty() ? "2GiB" : args.memory, args.options.out);
  return 0;
}

RegisterCommand init_command("init", [](CLI::App& app) {
  app.description(
      "Look at a dataset (headers, a sample of tiles and thumbnails) and write a commented config that trains on it; "
      "bad files are reported one by one instead");
  auto args = std::make_shared<InitArgs>();
  app.add_option("DATA", args->options.data, "CSV manifest `path,label` or a folder with one sub-folder per class")
      ->required();
  app.add_option("--out", args->options.out, "the config to write")->capture_default_str();
  app.add_option("--memory", args->memory, "memory budget of a training step, e.g. 2GiB, 512MiB (default 2GiB)");
  app.add_option("--device", args->options.device, "where the run trains: cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_option("--sample", args->options.sample_images, "images whose tiles and thumbnails are examined")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_flag("--force", args->force, "replace an existing --out");
  return std::function<int()>([args] { return run(*args); });
});

}  // namespace
}  // namespace bigtrain::cli
