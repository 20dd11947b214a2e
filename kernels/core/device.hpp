#pragma once
#include <cstdint>
#include <string>

namespace bigtrain {

enum class DeviceType : std::uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  friend bool operator==(const Device&, const Device&) = default;
  std::string str() const;
};

// Which implementation of an op runs. `reference` is the naive loop used as the
// test oracle; it runs on host memory, like `cpu`.
enum class Backend : std::uint8_t { reference, cpu, cuda };

const char* backend_name(Backend backend);
Device backend_device(Backend backend);
// Which CUDA device the cuda backend runs on (default 0). A data-parallel rank picks
// its node-local one before any model is built (pipeline/distributed/distributed.cpp), so ranks
// sharing a machine use different GPUs. Not for switching devices mid-run.
void set_cuda_backend_device(int index);
// True when this build contains the CUDA backend (not whether a GPU is present).
bool cuda_compiled();
// Number of usable CUDA devices; 0 when not compiled or no driver/device.
int cuda_device_count();

// u8 and i32 hold pixels, labels, masks and op workspaces (max-pool argmax).
enum class DType : std::uint8_t { f32, bf16, f16, u8, i32 };
std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);

}  // namespace bigtrain
