// `bigtrain report RUN_DIR [--open]`: rewrites RUN_DIR/report.html (and the
// TensorBoard event file) from the files in the run directory.
#include <cstdlib>
#include <memory>

#include <fmt/format.h>

#include "pipeline/cli/command_registry.hpp"
#include "pipeline/report.hpp"
#include "pipeline/tensorboard.hpp"

namespace bigtrain::cli {
namespace {

struct ReportArgs {
  std::string run_dir;
  bool open = false;
};

bool have_xdg_open() { return std::system("command -v xdg-open >/dev/null 2>&1") == 0; }

RegisterCommand report("report", [](CLI::App& app) {
  app.description("Regenerate RUN_DIR/report.html and the TensorBoard scalars from a run directory");
  auto a = std::make_shared<ReportArgs>();
  app.add_option("run_dir", a->run_dir, "a run directory written by `bigtrain run`")->required();
  app.add_flag("--open", a->open, "open the page with xdg-open (prints its path when xdg-open is absent)");
  return std::function<int()>([a] {
    const std::string path = write_run_report(a->run_dir);
    write_tensorboard_events(a->run_dir);
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
