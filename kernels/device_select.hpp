#pragma once
// Turns the run configuration's `device.type` into the backend every op runs on.
#include <cstddef>
#include <string>
#include <string_view>

#include "kernels/core/device.hpp"

namespace bigtrain::kernels {

// "cpu" -> cpu; "cuda" -> cuda, or a bigtrain::Error saying why no GPU can be used
// (build without the CUDA backend, no driver, no device, GPU `index` missing or of a
// compute capability this binary has no code for, naming the card and the built
// list); "auto" -> cuda when GPU `index` is usable, else cpu, with a warning saying
// why when a GPU is present but unusable. Anything else is an error listing the
// valid values. index -1: the cuda backend's device (set_cuda_backend_device).
Backend select_backend(std::string_view device_type, int index = -1);

// select_backend's rule apart from the machine, so it is tested with made-up GPUs.
// `unavailable`: why no GPU can be used at all (no build, no driver, no device),
// empty when one is present; `unusable`: why the chosen GPU cannot run this build
// (index out of range, a capability without code: cuda_arch_mismatch), empty when it
// can. `warning` is what select_backend logs (device: auto on an unusable GPU).
struct BackendChoice {
  Backend backend = Backend::cpu;
  std::string warning;
};
BackendChoice choose_backend(std::string_view device_type, std::string_view unavailable, std::string_view unusable);

// device.memory_limit (0: none) and train.cudnn_workspace for the cuda backend's
// device: the allocator's cap, and the most scratch a convolution's algorithm may use
// (ops choose theirs when created, so before the model's first step).
void apply_cuda_limits(std::size_t memory_limit, std::size_t cudnn_workspace);

// One line for logs: "cuda (2 devices)" or "cpu (cuda: no CUDA driver or no GPU on this machine)".
std::string describe_backend_choice(Backend backend);

}  // namespace bigtrain::kernels
