#include "kernels/cuda/arch_probe.hpp"

#include <cuda_runtime.h>

#define BIGTRAIN_STRINGIFY_IMPL(...) #__VA_ARGS__
#define BIGTRAIN_STRINGIFY(...) BIGTRAIN_STRINGIFY_IMPL(__VA_ARGS__)

namespace bigtrain::cuda {
namespace {
// Never launched: cudaFuncGetAttributes on it asks the runtime to load this
// library's image for the current device, which fails the way the first real
// kernel would.
__global__ void probe_kernel(int* out) {
  if (out != nullptr) *out = 1;
}
}  // namespace

const char* nvcc_arch_list() {
#ifdef __CUDA_ARCH_LIST__
  return BIGTRAIN_STRINGIFY(__CUDA_ARCH_LIST__);
#else
  return "";
#endif
}

bool kernel_image_loads(int device_index, std::string& why) {
  cudaError_t status = cudaSetDevice(device_index);
  cudaFuncAttributes attributes{};
  if (status == cudaSuccess) status = cudaFuncGetAttributes(&attributes, probe_kernel);
  if (status == cudaSuccess) return true;
  why = cudaGetErrorString(status);
  cudaGetLastError();
  return false;
}

}  // namespace bigtrain::cuda
