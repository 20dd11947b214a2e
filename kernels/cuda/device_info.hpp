#pragma once
// What a benchmark reports about a GPU: its name, memory, and the float32 peak it
// is measured against.
#include <cstddef>
#include <string>

namespace bigtrain::cuda {

struct DeviceInfo {
  std::string name;
  int compute_major = 0, compute_minor = 0;
  int multiprocessors = 0;
  double clock_ghz = 0.0;  // peak SM clock
  std::size_t total_memory = 0;
  // Non-tensor-core float32 peak: SMs x FP32 lanes per SM x 2 (an FMA is two
  // flops) x peak clock. H100/H200 SXM: 132 x 128 x 2 x 1.98 GHz = 66.9 TFLOP/s.
  double fp32_peak_tflops = 0.0;
};

// Throws bigtrain::Error when the device cannot be used.
DeviceInfo device_info(int index);
// The same from the driver alone (no context, no cuDNN/cuBLAS handles): what
// `bigtrain devices` lists, also for a card this build cannot run on.
DeviceInfo device_properties(int index);

}  // namespace bigtrain::cuda
