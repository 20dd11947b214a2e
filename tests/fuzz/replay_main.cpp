// Runs a fuzz target on saved inputs without libFuzzer: `replay DIR|FILE...`.
// Directories are walked recursively in sorted order; a missing directory counts as
// empty (git keeps no empty regression folders), but no input at all is a failure,
// so a mistyped path cannot make the test pass vacuously.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_target.hpp"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path path(argv[i]);
    if (fs::is_regular_file(path)) {
      inputs.push_back(path);
    } else if (fs::is_directory(path)) {
      for (const auto& entry : fs::recursive_directory_iterator(path))
        if (entry.is_regular_file()) inputs.push_back(entry.path());
    } else {
      std::printf("replay: %s does not exist (no inputs there)\n", argv[i]);
    }
  }
  std::sort(inputs.begin(), inputs.end());
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs found in the given paths\n");
    return 1;
  }
  for (const fs::path& path : inputs) {
    // Printed before running, so a crash is attributed to its input.
    std::printf("replay: %s\n", path.c_str());
    std::fflush(stdout);
    std::ifstream in(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    bigtrain_fuzz_one_input(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replay: %zu inputs ran cleanly\n", inputs.size());
  return 0;
}
