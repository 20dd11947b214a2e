// cuBLAS is loaded on first use, not at start (kernels/cuda/cublas_lazy.hpp): a CPU
// run must not carry libcublasLt's 148 MiB of resident pages. Neither test needs a
// GPU: loading the library and finding its functions does not touch a device.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#ifdef BIGTRAIN_HAVE_CUDA
#include "kernels/cuda/cublas_lazy.hpp"
#endif

namespace bigtrain {
namespace {

std::string mapped_files() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str();
}

#ifdef BIGTRAIN_HAVE_CUDA

// ctest runs each test in a process of its own, so nothing before this one used cuBLAS.
TEST(CublasLazy, NotLoadedAtStart) {
  const std::string maps = mapped_files();
  EXPECT_EQ(maps.find("libcublas"), std::string::npos) << "cuBLAS is mapped before any use:\n" << maps;
  EXPECT_NE(maps.find("libcudart"), std::string::npos) << "the CUDA runtime itself is still linked";
}

TEST(CublasLazy, EveryFunctionBigtrainCallsResolves) {
  const auto missing = cuda::unresolved_cublas_functions();
  EXPECT_TRUE(missing.empty()) << cuda::cublas_library_name() << " lacks " << missing.front();
  EXPECT_NE(mapped_files().find(cuda::cublas_library_name()), std::string::npos) << "loaded once asked for";
}

#else

TEST(CublasLazy, NotLoadedAtStart) {
  GTEST_SKIP() << "build: no CUDA backend in this build (BIGTRAIN_CUDA=OFF or no toolkit), so no cuBLAS to load";
}

#endif

}  // namespace
}  // namespace bigtrain
