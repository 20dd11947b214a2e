// The `bigtrain` executable: parses the command line, sets up logging and runs the
// chosen subcommand. Errors reach the user as one clear line and a nonzero exit.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>

#include <spdlog/spdlog.h>

#include "pipeline/cli/command_registry.hpp"
#include "pipeline/common/logging.hpp"

namespace bigtrain::cli {
std::vector<CommandRegistration>& command_registry() {
  static std::vector<CommandRegistration> registry;
  return registry;
}
}  // namespace bigtrain::cli

int main(int argc, char** argv) {
  using namespace bigtrain;
  CLI::App app{"bigtrain: train and run CNN classifiers on images far larger than device memory"};
  app.set_version_flag("--version", std::string("bigtrain ") + BIGTRAIN_VERSION);
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->capture_default_str();

  auto registry = cli::command_registry();
  std::sort(registry.begin(), registry.end(), [](auto& a, auto& b) { return a.name < b.name; });
  std::map<CLI::App*, std::function<int()>> runners;
  for (auto& command : registry) {
    CLI::App* sub = app.add_subcommand(command.name);
    runners[sub] = command.setup(*sub);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error);
  }
  setup_logging(log_level);
  for (auto& [sub, run] : runners) {
    if (!sub->parsed()) continue;
    try {
      return run();
    } catch (const std::exception& error) {
      spdlog::error("{}", error.what());
      return 1;
    }
  }
  return 2;
}
