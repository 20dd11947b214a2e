#pragma once
// `bigtrain init DATA`: a config for a dataset the user has never trained on. It
// looks at the data (every header, a sample of tiles and thumbnails), asks the memory
// planner what fits, and writes a commented config that runs as is. Bad data (files
// that do not open, mixed channel counts, a class with one image) is reported per
// file instead, before any training.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bigtrain {

struct InitOptions {
  std::string data;                   // CSV manifest `path,label` or a folder per class
  std::string out = "config.yaml";    // where the config goes (its folder anchors relative paths)
  std::optional<std::size_t> memory;  // budget of one training step; unset: 2 GiB
  std::string device = "cpu";         // cpu | cuda: what the memory is planned for and the run uses
  int sample_images = 8;              // images whose tiles and thumbnails are examined
  std::uint64_t seed = 0;
};

struct InitResult {
  std::vector<std::string> problems;   // one per bad file or class; non-empty: no config
  std::vector<std::string> decisions;  // what was chosen and why, one line each
  std::string yaml;                    // the commented config (empty with problems)
};

// Throws Error for a manifest or folder that cannot be read at all.
InitResult init_config(const InitOptions& options);

}  // namespace bigtrain
