// `bigtrain run CONFIG [--set key=value]... [--resume RUN_DIR]`: tiled end-to-end training.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>

#include "pipeline/cli/command_registry.hpp"
#include "pipeline/common/logging.hpp"
#include "pipeline/config/config.hpp"
#include "pipeline/distributed/distributed.hpp"
#include "pipeline/train/interrupt.hpp"
#include "pipeline/train/trainer.hpp"

namespace bigtrain::cli {
namespace {

// `text` as one shell word (single quotes unless it needs none).
std::string shell_word(const std::string& text) {
  const bool plain = !text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) {
    return std::isalnum(c) || std::strchr("_-./=,:@%+", c) != nullptr;
  });
  if (plain) return text;
  std::string quoted = "'";
  for (char c : text) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// The command that continues this run: the same config and --set overrides (except
// output.dir, which --resume sets).
std::string resume_command(const std::string& config_path, const std::vector<std::string>& overrides,
                           const std::string& run_dir) {
  std::string command = "bigtrain run " + shell_word(config_path);
  for (const auto& setting : overrides)
    if (setting.rfind("output.dir=", 0) != 0) command += " --set " + shell_word(setting);
  return command + " --resume " + shell_word(run_dir);
}

RegisterCommand run_command("run", [](CLI::App& app) {
  app.description("Train a classifier on large images as the config says (tiled, two passes per image)");
  auto config_path = std::make_shared<std::string>();
  auto overrides = std::make_shared<std::vector<std::string>>();
  auto resume = std::make_shared<std::string>();
  auto epochs_now = std::make_shared<std::int64_t>(-1);
  app.add_option("config", *config_path, "the run's YAML config")->required()->check(CLI::ExistingFile);
  app.add_option("--set", *overrides, "override a config key, e.g. --set train.epochs=5 (repeatable)");
  app.add_option("--resume", *resume, "continue the stopped run in this directory (its output.dir)");
  app.add_option("--stop-after", *epochs_now, "stop after this many epochs of this invocation (resume later)");
  return std::function<int()>([config_path, overrides, resume, epochs_now] {
    // Under mpirun: one rank of a data-parallel run (pipeline/distributed/distributed.hpp).
    DistributedSession session;
    Communicator& comm = world();
    if (!comm.is_root()) {
      // Rank 0 speaks for the run (log.txt, progress); the others only warn.
      spdlog::set_level(spdlog::level::warn);
      spdlog::set_pattern(fmt::format("[%H:%M:%S rank {}] [%l] %v", comm.rank()));
    }
    try {
      std::vector<std::string> settings = *overrides;
      if (!resume->empty()) settings.push_back("output.dir=" + *resume);
      Config config = load_config(*config_path, settings);
      std::filesystem::create_directories(config.output.dir);
      if (comm.is_root()) add_log_file((std::filesystem::path(config.output.dir) / "log.txt").string());
      // Ctrl-C / SIGTERM finish the step and checkpoint. Not under mpirun: the ranks
      // would have to agree on the step to stop at (mpirun forwards the signal and
      // the previous checkpoint stays loadable, as after kill -9).
      if (!comm.distributed()) install_stop_handlers();
      Trainer trainer(config, !resume->empty());
      trainer.set_epoch_limit(*epochs_now);
      const TrainOutcome outcome = trainer.run();
      const std::string resume_with = resume_command(*config_path, *overrides, config.output.dir);
      if (outcome.interrupted) {
        spdlog::error("interrupted at {}; the checkpoint in {}/checkpoints continues it exactly. Resume with:\n  {}",
                      outcome.stopped_at, config.output.dir, resume_with);
        // The shell's convention for a process ended by a signal.
        return outcome.stop_signal ? 128 + outcome.stop_signal : 1;
      }
      if (outcome.epochs_completed < config.train.epochs && !outcome.stopped_early)
        spdlog::info("stopped after epoch {}; continue with: {}", outcome.epochs_completed, resume_with);
      spdlog::info("run directory: {}", config.output.dir);
      return 0;
    } catch (const std::exception& error) {
      // The other ranks would wait in their next collective: end the whole job now.
      if (comm.distributed()) comm.abort(error.what());
      throw;
    }
  });
});

}  // namespace
}  // namespace bigtrain::cli
