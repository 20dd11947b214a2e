// `bigtrain report RUN_DIR [--open]`: rewrites RUN_DIR/report.html (and the
// TensorBoard event file) from the files in the run directory. Given the output
// folder of `bigtrain sweep` or `bigtrain compare`, rewrites its sweep.html /
// compare.html and the pages of its runs.
#include <cstdlib>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "pipeline/cli/command_registry.hpp"
#include "pipeline/report/report.hpp"
#include "pipeline/report/tensorboard.hpp"
#include "pipeline/train/report_heatmaps.hpp"

namespace bigtrain::cli {
namespace {

struct ReportArgs {
  std::string run_dir;
  bool open = false;
  bool heatmaps = false;
};

bool have_xdg_open() { return std::system("command -v xdg-open >/dev/null 2>&1") == 0; }

RegisterCommand report("report", [](CLI::App& app) {
  app.description("Regenerate RUN_DIR/report.html and the TensorBoard scalars from a run directory");
  auto a = std::make_shared<ReportArgs>();
  app.add_option("run_dir", a->run_dir, "a run directory written by `bigtrain run` (or a sweep / compare output folder)")->required();
  app.add_flag("--heatmaps", a->heatmaps,
               "draw the heatmaps of correct and wrong validation images with the best checkpoint first (the trainer "
               "does this itself; for runs made without it)");
  app.add_flag("--open", a->open, "open the page with xdg-open (prints its path when xdg-open is absent)");
  return std::function<int()>([a] {
    std::string path;
    namespace fs = std::filesystem;
    const fs::path dir(a->run_dir);
    if (!fs::exists(dir / "metrics.csv") && (fs::exists(dir / "sweep.csv") || fs::exists(dir / "compare.csv"))) {
      // A `bigtrain sweep` / `bigtrain compare` folder: its table page (and its runs' pages).
      for (const std::string kind : {"compare", "sweep"})
        if (fs::exists(dir / (kind + ".csv"))) path = write_table_report(a->run_dir, kind);
    } else {
      if (a->heatmaps) {
        const ReportHeatmapSet set = redraw_report_heatmaps(a->run_dir);
        fmt::print(stderr, "{} heatmaps of the epoch-{} checkpoint, {} validation images classified\n",
                   set.heatmaps.size(), set.epoch, set.scanned);
      }
      path = write_run_report(a->run_dir);
      write_tensorboard_events(a->run_dir);
    }
    if (a->open && have_xdg_open()) {
      // The path comes from the user's own argument; quote it for the shell anyway.
      std::string quoted = "'";
      for (char c : path) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
      quoted += "'";
      if (std::system(("xdg-open " + quoted + " >/dev/null 2>&1 &").c_str()) != 0)
        fmt::print(stderr, "xdg-open failed; open {} yourself\n", path);
    }
    fmt::print("{}\n", path);
    return 0;
  });
});

}  // namespace
}  // namespace bigtrain::cli
