// `bigtrain sweep CONFIG --grid tiler.tile=128,256,512 --grid tiler.overlap=0,32,64
// [--epochs N] [--out DIR] [--set k=v]`: one run per combination into DIR/<combination>,
// then DIR/sweep.csv, DIR/sweep.md and DIR/sweep.html, best first, every figure read from the run's
// own metrics.csv (pipeline/experiments/compare.hpp).
#include <filesystem>
#include <set>

#include <fmt/ranges.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "pipeline/cli/command_registry.hpp"
#include "pipeline/common/atomic_file.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/experiments/compare.hpp"
#include "pipeline/experiments/sweep.hpp"
#include "pipeline/report/report.hpp"
#include "pipeline/train/trainer.hpp"

namespace bigtrain::cli {
namespace {
namespace fs = std::filesystem;

struct SweepArgs {
  std::string config;
  std::vector<std::string> grid;
  std::vector<std::string> overrides;
  std::string out = "runs/sweep";
  std::int64_t epochs = 0;
  bool reuse = false;
};

int run(const SweepArgs& args) {
  std::vector<std::pair<std::string, std::vector<std::string>>> axes;
  for (const std::string& g : args.grid) axes.push_back(parse_grid_axis(g));
  const auto combos = grid_combinations(axes);
  fs::create_directories(args.out);
  // Every combination is validated before any trains: a bad value fails in seconds.
  std::vector<Config> configs;
  for (const auto& combo : combos) {
    std::vector<std::string> overrides = args.overrides;
    if (args.epochs > 0) overrides.push_back(fmt::format("train.epochs={}", args.epochs));
    overrides.insert(overrides.end(), combo.begin(), combo.end());
    configs.push_back(load_config(args.config, overrides));
  }
  std::set<std::string> names;
  for (const auto& combo : combos)
    BT_CHECK(names.insert(combination_name(combo)).second,
             "--grid: two combinations share the folder name {} (keys ending in the same word?)", combination_name(combo));
  std::string grid_text;
  for (const std::string& g : args.grid) grid_text += (grid_text.empty() ? "" : " × ") + g;
  std::vector<CompareRow> rows;
  const fs::path out(args.out);
  // The tables are rewritten after every run, so a long sweep can be watched (and a
  // stopped one still has the finished runs tabulated); each run's own report.html
  // then shows the table with its row marked.
  auto write_tables = [&] {
    std::vector<CompareRow> sorted = rows;
    sort_best_first(sorted);
    write_file_atomically((out / "sweep.csv").string(), compare_csv(sorted));
    write_file_atomically((out / "sweep.md").string(), compare_markdown(sorted));
    write_table_report(args.out, "sweep",
                       fmt::format("grid {}: {} of {} runs done; accuracy is each run's last validation epoch", grid_text,
                                   sorted.size(), combos.size()));
    return sorted;
  };
  for (std::size_t i = 0; i < combos.size(); ++i) {
    const std::string name = combination_name(combos[i]);
    const std::string run_dir = (out / name).string();
    if (!(args.reuse && fs::exists(fs::path(run_dir) / "metrics.csv"))) {
      spdlog::info("sweep {}/{}: {}", i + 1, combos.size(), fmt::join(combos[i], " "));
      configs[i].output.dir = run_dir;
      Trainer(configs[i], /*resume=*/false).run();
    }
    rows.push_back(compare_row_from_run(name, run_dir, /*prefer_test=*/false));
    write_tables();
  }
  fmt::print("{}", compare_markdown(write_tables()));
  return 0;
}

RegisterCommand sweep_command("sweep", [](CLI::App& app) {
  app.description("Train one run per combination of --grid values and tabulate them, best first");
  auto args = std::make_shared<SweepArgs>();
  app.add_option("CONFIG", args->config, "run configuration (YAML)")->required()->check(CLI::ExistingFile);
  app.add_option("--grid", args->grid, "key=v1,v2,... (repeatable; the runs are every combination)")->required();
  app.add_option("--epochs", args->epochs, "epochs per run (default: the config's)")->check(CLI::NonNegativeNumber);
  app.add_option("--out", args->out, "folder of the runs and of sweep.csv / sweep.md / sweep.html")->capture_default_str();
  app.add_option("--set", args->overrides, "override a key in every run (repeatable)");
  app.add_flag("--reuse", args->reuse, "read a run already in OUT/<combination> instead of training it again");
  return std::function<int()>([args] { return run(*args); });
});

}  // namespace
}  // namespace bigtrain::cli
