#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <vector>

#include "kernels/core/block_allocator.hpp"
#include "kernels/core/cuda_arch.hpp"
#include "kernels/cuda/arch_probe.hpp"
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

// cudaMalloc/cudaFree for the device's BlockAllocator (kernels/core/block_allocator.hpp).
class CudaSystemAllocator final : public SystemAllocator {
 public:
  explicit CudaSystemAllocator(int index) : index_(index) {}
  void* allocate(std::size_t bytes) override {
    BT_CUDA_CHECK(cudaSetDevice(index_));
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaSuccess) return ptr;
    // Out of memory is not sticky; clear it so the retry and later calls start clean.
    cudaGetLastError();
    if (status != cudaErrorMemoryAllocation) BT_CUDA_CHECK(status);
    std::size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) cudaGetLastError();
    last_failure_ = fmt::format("cudaMalloc of {} bytes: out of memory, {} of {} bytes free on the device", bytes,
                                free_bytes, total_bytes);
    return nullptr;
  }
  void free(void* ptr, std::size_t) override {
    // A failing free means the context is already broken; the next checked call says so.
    (void)cudaSetDevice(index_);
    (void)cudaFree(ptr);
  }
  std::string last_failure() const override { return last_failure_; }

 private:
  int index_;
  std::string last_failure_;
};

}  // namespace

int device_count() { return probe().count; }
const char* unavailable_reason() { return probe().reason; }

std::string device_unusable_reason(int device_index) {
  const int count = device_count();
  if (device_index < 0 || device_index >= count)
    return fmt::format("device.index {} names no GPU: this machine has {} (0..{})", device_index, count, count - 1);
  cudaDeviceProp props{};
  if (const cudaError_t status = cudaGetDeviceProperties(&props, device_index); status != cudaSuccess) {
    cudaGetLastError();
    return fmt::format("GPU {} cannot be queried: {}", device_index, cudaGetErrorString(status));
  }
  const std::vector<CudaArch>& built = built_cuda_architectures();
  if (std::string mismatch = cuda_arch_mismatch(props.name, props.major, props.minor, built); !mismatch.empty())
    return mismatch;
  // The list says yes; the runtime has the last word (a build from another list).
  if (std::string why; !kernel_image_loads(device_index, why))
    return fmt::format("GPU '{}' (compute capability {}.{}) cannot load this build's kernels: {} (built: {})",
                       props.name, props.major, props.minor, why, describe_cuda_architectures(built));
  return {};
}

Allocator& device_allocator(int device_index) {
  static std::once_flag once;
  // Never destroyed: tensors held by statics are freed after it would have been, and
  // the driver releases device memory with the context at exit anyway.
  static auto* allocators = new std::vector<std::unique_ptr<BlockAllocator>>;
  std::call_once(once, [] {
    for (int i = 0; i < device_count(); ++i)
      allocators->push_back(std::make_unique<BlockAllocator>(Device::cuda(i), std::make_unique<CudaSystemAllocator>(i)));
  });
  BT_CHECK(device_index >= 0 && device_index < static_cast<int>(allocators->size()),
           "CUDA device {} requested, but {} usable device(s): {}", device_index, allocators->size(),
           device_count() == 0 ? unavailable_reason() : "index out of range");
  return *(*allocators)[device_index];
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
