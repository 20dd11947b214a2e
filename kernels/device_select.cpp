#include "kernels/device_select.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"

#include "kernels/core/block_allocator.hpp"

#ifdef BIGTRAIN_HAVE_CUDA
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/runtime.hpp"
#endif

namespace bigtrain::kernels {
namespace {

// Why the CUDA backend cannot run here at all (no build, no driver, no GPU), or empty.
std::string cuda_unavailable() {
#ifdef BIGTRAIN_HAVE_CUDA
  return cuda::device_count() > 0 ? std::string() : std::string(cuda::unavailable_reason());
#else
  return "this build of bigtrain has no CUDA backend (configure with -DBIGTRAIN_CUDA=ON where the CUDA toolkit and "
         "cuDNN are installed)";
#endif
}

// Why GPU `index` of a machine that has GPUs cannot run this binary (index out of
// range, a compute capability it has no code for), or empty.
std::string cuda_device_unusable([[maybe_unused]] int index) {
#ifdef BIGTRAIN_HAVE_CUDA
  return cuda::device_unusable_reason(index);
#else
  return {};
#endif
}

}  // namespace

BackendChoice choose_backend(std::string_view device_type, std::string_view unavailable, std::string_view unusable) {
  if (device_type == "cpu") return {Backend::cpu, {}};
  if (device_type == "cuda") {
    if (!unavailable.empty()) throw Error(fmt::format("device: cuda was requested, but no GPU can be used: {}", unavailable));
    if (!unusable.empty()) throw Error(fmt::format("device: cuda was requested, but {}", unusable));
    return {Backend::cuda, {}};
  }
  if (device_type == "auto") {
    // No GPU at all: the CPU is the plain choice, said in the "device:" log line, no warning.
    if (!unavailable.empty()) return {Backend::cpu, {}};
    if (!unusable.empty()) return {Backend::cpu, fmt::format("device: auto runs on the CPU: {}", unusable)};
    return {Backend::cuda, {}};
  }
  throw Error(fmt::format("device: unknown device type '{}' (valid: cpu, cuda, auto)", device_type));
}

Backend select_backend(std::string_view device_type, int index) {
  if (index < 0) index = backend_device(Backend::cuda).index;
  const std::string unavailable = device_type == "cpu" ? std::string() : cuda_unavailable();
  const std::string unusable =
      device_type == "cpu" || !unavailable.empty() ? std::string() : cuda_device_unusable(index);
  const BackendChoice choice = choose_backend(device_type, unavailable, unusable);
  if (!choice.warning.empty()) spdlog::warn("{}", choice.warning);
  return choice.backend;
}

void apply_cuda_limits([[maybe_unused]] std::size_t memory_limit, [[maybe_unused]] std::size_t cudnn_workspace) {
#ifdef BIGTRAIN_HAVE_CUDA
  set_device_memory_limit(backend_device(Backend::cuda), memory_limit);
  cuda::Context::of_backend("train.cudnn_workspace").set_workspace_limit(cudnn_workspace);
#else
  throw Error("device.memory_limit and train.cudnn_workspace need the CUDA backend, which this build lacks");
#endif
}

std::string describe_backend_choice(Backend backend) {
  if (backend == Backend::cuda) return fmt::format("cuda ({} device(s))", cuda_device_count());
  const std::string reason = cuda_unavailable();
  return reason.empty() ? std::string(backend_name(backend))
                        : fmt::format("{} (cuda: {})", backend_name(backend), reason);
}

}  // namespace bigtrain::kernels
