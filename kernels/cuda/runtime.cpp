#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/runtime.hpp"

namespace bigtrain::cuda {

void raise_status(const char* library, const char* call, const char* status, const char* file, int line) {
  throw Error(fmt::format("{} call `{}` failed: {} ({}:{})", library, call, status, file, line));
}

namespace {

struct DeviceProbe {
  int count = 0;
  const char* reason = "";
  DeviceProbe() {
    cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
      count = 0;
      reason = status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice ? "no CUDA driver or no GPU on this machine"
                                                                                     : cudaGetErrorString(status);
      cudaGetLastError();  // clear the sticky error so later probes start clean
    } else if (count == 0) {
      reason = "the CUDA driver reports no GPU";
    }
  }
};

const DeviceProbe& probe() {
  static DeviceProbe instance;
  return instance;
}

class CudaAllocator final : public CachingAllocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}
  ~CudaAllocator() override { release_all_cached_locked(); }
  Device device() const override { return Device::cuda(index_); }

 protected:
  void* system_allocate(std::size_t bytes) override {
    BT_CUDA_CHECK(cudaSetDevice(index_));
    void* ptr = nullptr;
    BT_CUDA_CHECK(cudaMalloc(&ptr, bytes));
    return ptr;
  }
  void system_free(void* ptr, std::size_t) override { cudaFree(ptr); }

 private:
  int index_;
};

}  // namespace

int device_count() { return probe().count; }
const char* unavailable_reason() { return probe().reason; }

Allocator& device_allocator(int device_index) {
  static std::once_flag once;
  static std::vector<std::unique_ptr<CudaAllocator>> allocators;
  std::call_once(once, [] {
    for (int i = 0; i < device_count(); ++i) allocators.push_back(std::make_unique<CudaAllocator>(i));
  });
  BT_CHECK(device_index >= 0 && device_index < static_cast<int>(allocators.size()),
           "CUDA device {} requested, but {} usable device(s): {}", device_index, allocators.size(),
           device_count() == 0 ? unavailable_reason() : "index out of range");
  return *allocators[device_index];
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
  cudaMemcpyKind kind = dst_device.is_cuda() ? (src_device.is_cuda() ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                             : cudaMemcpyDeviceToHost;
  BT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
}

void zero_bytes(void* dst, Device device, std::size_t bytes) {
  BT_CUDA_CHECK(cudaSetDevice(device.index));
  BT_CUDA_CHECK(cudaMemset(dst, 0, bytes));
}

}  // namespace bigtrain::cuda
