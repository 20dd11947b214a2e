#pragma once
// Which GPUs a build of bigtrain can run on. nvcc puts one cubin (SASS) per "real"
// architecture and PTX per "virtual" one into the binary; a device runs a cubin of
// its own major version and an equal or lower minor (sm_80 code runs on 8.6), or
// JIT-compiles PTX of an equal or lower capability. A device matching neither
// fails at its first kernel with "no kernel image is available", so the backend
// checks at startup instead and says what was built. Pure functions: tested with
// made-up devices on machines without a GPU.
#include <string>
#include <string_view>
#include <vector>

namespace bigtrain {

struct CudaArch {
  int major = 0, minor = 0;
  bool ptx = false;       // virtual code, JIT-compiled for newer devices; else a cubin
  bool specific = false;  // sm_90a-style: a cubin for exactly this capability
  friend bool operator==(const CudaArch&, const CudaArch&) = default;
};

// CMake's CUDA_ARCHITECTURES syntax, ';' or ',' between entries: "75-real;80-real;90" ("90" is a cubin and PTX,
// "90-virtual" PTX only, "90a-real" an arch-specific cubin). Keywords (all, native)
// and anything else that is not a list of numbers give an empty list.
std::vector<CudaArch> parse_cuda_architectures(std::string_view cmake_list);
// nvcc's __CUDA_ARCH_LIST__ ("750,800,900"): the architectures code was generated
// for, with no word on cubin or PTX; read as cubins, the newest also as PTX (what
// CMake's all/all-major/native produce).
std::vector<CudaArch> parse_nvcc_arch_list(std::string_view nvcc_list);
// "sm_75, sm_80, sm_90 + PTX compute_90"
std::string describe_cuda_architectures(const std::vector<CudaArch>& built);
bool cuda_arch_runs_on(const std::vector<CudaArch>& built, int major, int minor);
// Empty when a device of this capability can run the build; else the error a user
// reads: the card, its capability, the built list and what to do.
std::string cuda_arch_mismatch(std::string_view device_name, int major, int minor,
                               const std::vector<CudaArch>& built);
// This binary's list (from CMake's CUDA_ARCHITECTURES, or nvcc's own list when that
// was a keyword); empty in a build without the CUDA backend.
const std::vector<CudaArch>& built_cuda_architectures();

}  // namespace bigtrain
