// Fuzz target for the run config: YAML text plus `--set` overrides through
// parse_config, the same path `bigtrain train CONFIG --set ...` takes.
//
// Input format (so seeds stay readable and editable): the YAML text, optionally
// followed by a line `#--set` (a YAML comment, so seeds remain valid YAML) and one
// override `key=value` per line after it.
//
// Invariants checked beyond "no crash": every failure is a bigtrain::Error naming the
// config file or the --set that caused it; an accepted config survives the trip
// through its resolved YAML unchanged (config.hpp promises parse_config of
// config_to_yaml gives the same Config; run directories rely on it).
#include <string>
#include <string_view>
#include <vector>

#include "kernels/core/error.hpp"
#include "pipeline/config/config.hpp"
#include "tests/fuzz/fuzz_target.hpp"

namespace {

constexpr std::string_view kSeparator = "\n#--set\n";
constexpr const char* kSource = "fuzz.yaml";

void split_input(std::string_view input, std::string& yaml, std::vector<std::string>& overrides) {
  const auto separator = input.find(kSeparator);
  yaml = std::string(input.substr(0, separator));
  if (separator == std::string_view::npos) return;
  std::string_view rest = input.substr(separator + kSeparator.size());
  while (!rest.empty()) {
    const auto newline = rest.find('\n');
    overrides.emplace_back(rest.substr(0, newline));
    if (newline == std::string_view::npos) break;
    rest.remove_prefix(newline + 1);
  }
}

}  // namespace

int bigtrain_fuzz_one_input(const std::uint8_t* data, std::size_t size) {
  std::string yaml;
  std::vector<std::string> overrides;
  split_input(std::string_view(reinterpret_cast<const char*>(data), size), yaml, overrides);
  bigtrain::Config config;
  try {
    config = bigtrain::parse_config(yaml, kSource, overrides);
  } catch (const bigtrain::Error& error) {
    const std::string message = error.what();
    if (message.find(kSource) == std::string::npos && message.find("--set") == std::string::npos)
      bigtrain_fuzz_fail("a config error names neither the file nor the --set", message.c_str());
    return 0;
  }
  const std::string resolved = bigtrain::config_to_yaml(config);
  std::string again;
  try {
    again = bigtrain::config_to_yaml(bigtrain::parse_config(resolved, "resolved.yaml"));
  } catch (const bigtrain::Error& error) {
    bigtrain_fuzz_fail("the resolved config of an accepted config is rejected", (std::string(error.what()) + "\n--- resolved:\n" + resolved).c_str());
  }
  if (again != resolved)
    bigtrain_fuzz_fail("the resolved config changes when read back",
                       ("--- first:\n" + resolved + "--- read back:\n" + again).c_str());
  return 0;
}
