#include "kernels/core/allocator.hpp"

#include "kernels/core/error.hpp"
#include "kernels/core/host_allocator.hpp"

#ifdef BIGTRAIN_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif

namespace bigtrain {

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) return host_allocator();
#ifdef BIGTRAIN_HAVE_CUDA
  return cuda::device_allocator(device.index);
#else
  throw Error(fmt::format("device {} requested, but this build of bigtrain has no CUDA backend "
                          "(configure with -DBIGTRAIN_CUDA=ON on a machine with the CUDA toolkit and cuDNN)",
                          device.str()));
#endif
}

}  // namespace bigtrain
