// The startup check of a GPU's compute capability against the architectures a
// build has code for, on made-up devices: runs without a GPU.
#include <gtest/gtest.h>

#include <string>

#include "kernels/core/cuda_arch.hpp"
#include "kernels/core/device.hpp"
#include "kernels/core/error.hpp"
#include "kernels/device_select.hpp"

namespace bigtrain {
namespace {

const std::vector<CudaArch> kDefault = parse_cuda_architectures("75-real;80-real;86-real;89-real;90");

TEST(CudaArch, ParsesCMakeListsIntoCubinsAndPtx) {
  EXPECT_EQ(kDefault.size(), 6u);
  EXPECT_EQ(describe_cuda_architectures(kDefault), "sm_75, sm_80, sm_86, sm_89, sm_90 + PTX compute_90");
  EXPECT_EQ(describe_cuda_architectures(parse_cuda_architectures("90-virtual")), "PTX compute_90");
  EXPECT_EQ(describe_cuda_architectures(parse_cuda_architectures("90a-real,120-real")), "sm_90a, sm_120");
  // The comma form is how CMake hands the list to the compiler.
  EXPECT_EQ(parse_cuda_architectures("75-real,80-real,86-real,89-real,90"), kDefault);
  EXPECT_TRUE(parse_cuda_architectures("native").empty());
  EXPECT_TRUE(parse_cuda_architectures("all-major").empty());
  EXPECT_TRUE(parse_cuda_architectures("75;junk").empty());
  EXPECT_TRUE(parse_cuda_architectures("").empty());
}

TEST(CudaArch, ParsesNvccsListWithTheNewestAsPtx) {
  EXPECT_EQ(describe_cuda_architectures(parse_nvcc_arch_list("750,800,900")),
            "sm_75, sm_80, sm_90 + PTX compute_90");
  EXPECT_EQ(describe_cuda_architectures(parse_nvcc_arch_list("1200")), "sm_120 + PTX compute_120");
  EXPECT_TRUE(parse_nvcc_arch_list("").empty());
}

TEST(CudaArch, DefaultListRunsOnEveryCardFromTuringOn) {
  // T4, A100, A10/RTX 3090, Jetson Orin (8.7: the sm_86 cubin), L4/RTX 4090, H100/H200,
  // B200 and RTX 5090 (Blackwell: the PTX).
  for (auto [major, minor] : {std::pair{7, 5}, {8, 0}, {8, 6}, {8, 7}, {8, 9}, {9, 0}, {10, 0}, {12, 0}})
    EXPECT_TRUE(cuda_arch_runs_on(kDefault, major, minor)) << major << "." << minor;
  // Volta and older: no cubin of their major, and PTX only runs on newer cards.
  for (auto [major, minor] : {std::pair{7, 0}, {6, 1}, {5, 2}})
    EXPECT_FALSE(cuda_arch_runs_on(kDefault, major, minor)) << major << "." << minor;
}

TEST(CudaArch, CubinsRunWithinTheirMajorOnlyAndPtxOnNewerCards) {
  const auto sm90 = parse_cuda_architectures("90-real");  // the old default
  EXPECT_TRUE(cuda_arch_runs_on(sm90, 9, 0));
  EXPECT_FALSE(cuda_arch_runs_on(sm90, 8, 9));
  EXPECT_FALSE(cuda_arch_runs_on(sm90, 10, 0));  // no PTX, no Blackwell
  const auto sm80 = parse_cuda_architectures("80-real");
  EXPECT_TRUE(cuda_arch_runs_on(sm80, 8, 6));
  EXPECT_FALSE(cuda_arch_runs_on(sm80, 7, 5));
  const auto specific = parse_cuda_architectures("90a-real");
  EXPECT_TRUE(cuda_arch_runs_on(specific, 9, 0));
  EXPECT_FALSE(cuda_arch_runs_on(specific, 9, 1));
  const auto ptx80 = parse_cuda_architectures("80-virtual");
  EXPECT_TRUE(cuda_arch_runs_on(ptx80, 12, 0));
  EXPECT_FALSE(cuda_arch_runs_on(ptx80, 7, 5));
}

TEST(CudaArch, MismatchNamesCardCapabilityAndBuiltList) {
  EXPECT_EQ(cuda_arch_mismatch("NVIDIA H200", 9, 0, kDefault), "");
  const std::string message = cuda_arch_mismatch("Tesla V100-SXM2-16GB", 7, 0, kDefault);
  EXPECT_EQ(message,
            "GPU 'Tesla V100-SXM2-16GB' has compute capability 7.0, which this build of bigtrain has no code for "
            "(built: sm_75, sm_80, sm_86, sm_89, sm_90 + PTX compute_90). Rebuild with -DBIGTRAIN_CUDA_ARCHS=70 (if "
            "the CUDA toolkit still supports it), or use device: cpu");
  EXPECT_NE(cuda_arch_mismatch("NVIDIA L4", 8, 9, parse_cuda_architectures("90")).find("(built: sm_90 + PTX compute_90)"),
            std::string::npos);
}

TEST(CudaArch, ThisBuildsListMatchesWhatWasConfigured) {
  const auto& built = built_cuda_architectures();
  if (!cuda_compiled()) {
    EXPECT_TRUE(built.empty());
    return;
  }
  ASSERT_FALSE(built.empty()) << "a CUDA build without a list of architectures";
  // The list compiled in by CMake and nvcc's own list for the kernels name the same
  // architectures (CMake's keywords aside, where only nvcc's is used).
  for (const CudaArch& arch : built)
    EXPECT_TRUE(cuda_arch_runs_on(built, arch.major, arch.minor)) << describe_cuda_architectures(built);
}

// device: auto and device: cuda on made-up machines: a GPU this build has no code for
// (a V100 against the default list), none at all, and one that runs it.
TEST(CudaArch, AutoFallsBackToTheCpuWithAWarningWhenTheCardIsUnsupported) {
  const std::string v100 = cuda_arch_mismatch("Tesla V100-SXM2-16GB", 7, 0, kDefault);
  ASSERT_FALSE(v100.empty());
  const kernels::BackendChoice choice = kernels::choose_backend("auto", "", v100);
  EXPECT_EQ(choice.backend, Backend::cpu);
  EXPECT_NE(choice.warning.find("device: auto runs on the CPU"), std::string::npos) << choice.warning;
  EXPECT_NE(choice.warning.find("Tesla V100-SXM2-16GB"), std::string::npos) << choice.warning;
  EXPECT_NE(choice.warning.find("compute capability 7.0"), std::string::npos) << choice.warning;
  EXPECT_NE(choice.warning.find("built: sm_75, sm_80, sm_86, sm_89, sm_90 + PTX compute_90"), std::string::npos)
      << choice.warning;
  // device: cuda on the same card is the error, with the same explanation.
  try {
    kernels::choose_backend("cuda", "", v100);
    FAIL() << "device: cuda accepted a card without code in the build";
  } catch (const Error& error) {
    EXPECT_EQ(std::string(error.what()), "device: cuda was requested, but " + v100);
  }
}

TEST(CudaArch, AutoTakesTheCpuQuietlyWithoutAGpuAndTheGpuWhenItRuns) {
  const kernels::BackendChoice none = kernels::choose_backend("auto", "no CUDA driver or no GPU on this machine", "");
  EXPECT_EQ(none.backend, Backend::cpu);
  EXPECT_EQ(none.warning, "");
  try {
    kernels::choose_backend("cuda", "no CUDA driver or no GPU on this machine", "");
    FAIL() << "device: cuda accepted a machine without a GPU";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no GPU can be used: no CUDA driver"), std::string::npos) << error.what();
  }
  const std::string l4 = cuda_arch_mismatch("NVIDIA L4", 8, 9, kDefault);
  EXPECT_EQ(l4, "");
  EXPECT_EQ(kernels::choose_backend("auto", "", l4).backend, Backend::cuda);
  EXPECT_EQ(kernels::choose_backend("cuda", "", l4).backend, Backend::cuda);
  EXPECT_EQ(kernels::choose_backend("cpu", "", l4).backend, Backend::cpu);
  EXPECT_THROW(kernels::choose_backend("gpu", "", ""), Error);
}

}  // namespace
}  // namespace bigtrain
