// `bigtrain compare CONFIG_A CONFIG_B [...] [--out DIR] [--set k=v] [--reuse]`: trains
// each config into DIR/<config name> (or, with --reuse, reads a run already there)
// and writes DIR/compare.csv, DIR/compare.md and DIR/compare.html, best first (pipeline/experiments/compare.hpp).
#include <filesystem>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "pipeline/cli/command_registry.hpp"
#include "pipeline/common/atomic_file.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/experiments/compare.hpp"
#include "pipeline/report/report.hpp"
#include "pipeline/train/trainer.hpp"

namespace bigtrain::cli {
namespace {

struct CompareArgs {
  std::vector<std::string> configs;
  std::vector<std::string> overrides;
  std::string out = "runs/compare";
  bool reuse = false;
};

int run(const CompareArgs& args) {
  BT_CHECK(args.configs.size() >= 2, "compare needs at least two configs, got {}", args.configs.size());
  std::filesystem::create_directories(args.out);
  std::vector<Config> configs;
  std::vector<std::string> names;
  for (const std::string& path : args.configs) {
    configs.push_back(load_config(path, args.overrides));
    std::string name = std::filesystem::path(path).stem().string();
    while (std::find(names.begin(), names.end(), name) != names.end()) name += "_";
    names.push_back(name);
  }
  // Equal terms: the same images for every config.
  for (std::size_t i = 1; i < configs.size(); ++i)
    if (configs[i].data.train != configs[0].data.train || configs[i].data.val != configs[0].data.val ||
        configs[i].data.test != configs[0].data.test)
      spdlog::warn("compare: {} and {} use different data; the table compares them anyway", args.configs[0],
                   args.configs[i]);
  std::vector<CompareRow> rows;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    const std::string run_dir = (std::filesystem::path(args.out) / names[i]).string();
    if (!(args.reuse && std::filesystem::exists(std::filesystem::path(run_dir) / "metrics.csv"))) {
      spdlog::info("compare: training {} into {}", args.configs[i], run_dir);
      configs[i].output.dir = run_dir;
      Trainer trainer(configs[i], /*resume=*/false);
      trainer.run();
    } else {
      spdlog::info("compare: reading the existing run {}", run_dir);
    }
    rows.push_back(compare_row_from_run(names[i], run_dir));
  }
  sort_best_first(rows);
  const std::string markdown = compare_markdown(rows);
  write_file_atomically((std::filesystem::path(args.out) / "compare.csv").string(), compare_csv(rows));
  write_file_atomically((std::filesystem::path(args.out) / "compare.md").string(), markdown);
  // The same table as a page, best row marked (issue 10; rows are sorted best first),
  // and each run's report.html rewritten to show it.
  write_table_report(args.out, "compare", "accuracy of each run's test split (else its last validation epoch)");
  fmt::print("{}", markdown);
  return 0;
}

RegisterCommand compare_command("compare", [](CLI::App& app) {
  app.description("Train several configs on the same data (or read their runs) and tabulate them side by side");
  auto args = std::make_shared<CompareArgs>();
  app.add_option("CONFIGS", args->configs, "two or more run configurations (YAML)")->required()->check(CLI::ExistingFile);
  app.add_option("--out", args->out, "folder of the runs and of compare.csv / compare.md")->capture_default_str();
  app.add_option("--set", args->overrides, "override a key in every config, e.g. --set train.epochs=2 (repeatable)");
  app.add_flag("--reuse", args->reuse, "read a run already in OUT/<config name> instead of training it again");
  return std::function<int()>([args] { return run(*args); });
});

}  // namespace
}  // namespace bigtrain::cli
