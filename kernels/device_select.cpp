#include "kernels/device_select.hpp"

#include <fmt/format.h>

#include "kernels/core/error.hpp"

#ifdef BIGTRAIN_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif

namespace bigtrain::kernels {
namespace {

// Why the CUDA backend cannot run here, or empty when it can.
std::string cuda_unavailable() {
#ifdef BIGTRAIN_HAVE_CUDA
  return cuda::device_count() > 0 ? std::string() : std::string(cuda::unavailable_reason());
#else
  return "this build of bigtrain has no CUDA backend (configure with -DBIGTRAIN_CUDA=ON where the CUDA toolkit and "
         "cuDNN are installed)";
#endif
}

}  // namespace

Backend select_backend(std::string_view device_type) {
  if (device_type == "cpu") return Backend::cpu;
  if (device_type == "cuda") {
    const std::string reason = cuda_unavailable();
    if (!reason.empty()) throw Error(fmt::format("device: cuda was requested, but no GPU can be used: {}", reason));
    return Backend::cuda;
  }
  if (device_type == "auto") return cuda_unavailable().empty() ? Backend::cuda : Backend::cpu;
  throw Error(fmt::format("device: unknown device type '{}' (valid: cpu, cuda, auto)", device_type));
}

std::string describe_backend_choice(Backend backend) {
  if (backend == Backend::cuda) return fmt::format("cuda ({} device(s))", cuda_device_count());
  const std::string reason = cuda_unavailable();
  return reason.empty() ? std::string(backend_name(backend))
                        : fmt::format("{} (cuda: {})", backend_name(backend), reason);
}

}  // namespace bigtrain::kernels
