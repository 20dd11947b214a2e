#pragma once
// Shared setup for the pipeline tests that train or read a small demo dataset
// (canvases of the real MNIST digits cached in tests/data/mnist):
//
//   fresh_scratch_dir(name)        an empty <tmp>/<name>_<pid>, the pid because ctest
//                                  runs the cases of one suite as parallel processes
//   make_test_demo_data(options)   make_demo_data on the cached digits, read once per process
//
// Each test keeps its own DemoDataOptions (sizes, classes, clutter, seed) in place,
// written as designated initializers, since those choices are what the test is about.
// Header-only: tests/CMakeLists.txt compiles only support/test_main.cpp into the suites.
#include <unistd.h>

#include <filesystem>
#include <string>

#include "pipeline/data/demo_data.hpp"

namespace bigtrain::testing {

inline std::filesystem::path fresh_scratch_dir(const std::string& name) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  return dir;
}

inline const MnistDigits& cached_mnist() {
  static const MnistDigits digits = load_mnist_folder(BIGTRAIN_SOURCE_DIR "/tests/data/mnist");
  return digits;
}

inline DemoDataSummary make_test_demo_data(const DemoDataOptions& options) {
  return make_demo_data(options, cached_mnist());
}

}  // namespace bigtrain::testing
