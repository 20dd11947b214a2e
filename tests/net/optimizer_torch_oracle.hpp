#pragma once
// PyTorch as a test oracle for the optimizer, schedule and clipping tests: a small
// script runs under Debian's /usr/bin/python3 (which has python3-torch; the default
// python3 may not) on inputs the test writes into it, and prints its results as
// numbers. Torch is never a build dependency: when it cannot be imported the tests
// skip and print why.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

namespace bigtrain::testing {

inline constexpr const char* kTorchPython = "/usr/bin/python3";

// Empty when torch imports; otherwise the reason, for GTEST_SKIP.
inline std::string torch_unavailable_reason() {
  static const std::string reason = [] {
    if (!std::filesystem::exists(kTorchPython)) return fmt::format("{} does not exist", kTorchPython);
    // find_spec locates torch without importing it (an import costs seconds).
    const std::string command = fmt::format(
        "{} -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec(\"torch\") is None)' >/dev/null 2>&1",
        kTorchPython);
    if (std::system(command.c_str()) != 0)
      return fmt::format("{} cannot import torch (install Debian's python3-torch)", kTorchPython);
    return std::string();
  }();
  return reason;
}

// Runs `script` under /usr/bin/python3 and returns its standard output; throws with
// the script's output when it fails, so a broken oracle is a failure, not a skip.
inline std::string run_torch_script(const std::string& script) {
  const auto dir = std::filesystem::temp_directory_path();
  const auto path = dir / fmt::format("bigtrain_oracle_{}_{}.py", ::getpid(), std::hash<std::string>{}(script));
  {
    std::ofstream out(path);
    out << script;
  }
  const std::string command = fmt::format("{} {} 2>&1", kTorchPython, path.string());
  std::string output;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) throw std::runtime_error("cannot start " + command);
  std::array<char, 4096> buffer{};
  while (std::size_t n = std::fread(buffer.data(), 1, buffer.size(), pipe)) output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  std::filesystem::remove(path);
  if (status != 0) throw std::runtime_error(fmt::format("torch oracle script failed ({}):\n{}", status, output));
  return output;
}

// Every whitespace-separated number of the text, in order.
inline std::vector<double> parse_numbers(const std::string& text) {
  std::istringstream in(text);
  std::vector<double> values;
  std::string word;
  while (in >> word) values.push_back(std::stod(word));
  return values;
}

// A Python list literal holding the values exactly (9 significant digits round-trip float32).
inline std::string python_list(std::span<const float> values) {
  return fmt::format("[{}]", fmt::join(values, ", "));
}

}  // namespace bigtrain::testing
