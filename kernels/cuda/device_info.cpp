#include "kernels/cuda/device_info.hpp"

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/context.hpp"

namespace bigtrain::cuda {
namespace {

// FP32 lanes per SM by architecture (CUDA C Programming Guide, "Arithmetic
// Instructions" throughput table: 32-bit floating-point add/multiply/FMA).
int fp32_lanes_per_sm(int major, int minor) {
  if (major == 8 && minor == 0) return 64;  // A100
  if (major >= 8) return 128;               // sm_86, sm_89, sm_90 (H100/H200), sm_100
  if (major == 7) return 64;                // V100, T4
  return 128;
}

}  // namespace

DeviceInfo device_info(int index) {
  Context::of(Device::cuda(index), "device_info");  // a clear error without a GPU
  return device_properties(index);
}

DeviceInfo device_properties(int index) {
  cudaDeviceProp props{};
  BT_CUDA_CHECK(cudaGetDeviceProperties(&props, index));
  int clock_khz = 0;
  BT_CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, index));
  DeviceInfo info;
  info.name = props.name;
  info.compute_major = props.major;
  info.compute_minor = props.minor;
  info.multiprocessors = props.multiProcessorCount;
  info.clock_ghz = clock_khz / 1e6;
  info.total_memory = props.totalGlobalMem;
  info.fp32_peak_tflops =
      static_cast<double>(props.multiProcessorCount) * fp32_lanes_per_sm(props.major, props.minor) * 2.0 *
      info.clock_ghz / 1e3;
  return info;
}

}  // namespace bigtrain::cuda
