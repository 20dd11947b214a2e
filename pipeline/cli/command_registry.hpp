#pragma once
// Each subcommand lives in its own file and registers itself here, so adding a
// command never edits main.cpp.
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace bigtrain::cli {

// Adds the subcommand to `app` and returns the function that runs it after parsing
// (its exit code).
using CommandSetup = std::function<std::function<int()>(CLI::App& app)>;

struct CommandRegistration {
  std::string name;
  CommandSetup setup;
};

std::vector<CommandRegistration>& command_registry();

struct RegisterCommand {
  RegisterCommand(std::string name, CommandSetup setup) {
    command_registry().push_back({std::move(name), std::move(setup)});
  }
};

}  // namespace bigtrain::cli
