// The device allocator on a real GPU: the cap of device.memory_limit holds against
// cudaMalloc, and the error names the tensor. The caching logic itself is tested
// without a GPU (block_allocator_test.cpp); these skip where there is none.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/core/allocator.hpp"
#include "kernels/core/block_allocator.hpp"
#include "kernels/core/out_of_memory.hpp"
#include "kernels/core/tensor.hpp"

namespace bigtrain {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

TEST(CudaAllocatorCap, RefusesPastTheCapAndNamesTheTensor) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "hardware: no CUDA device is present";
  Allocator& device = allocator_for(Device::cuda(0));
  device.release_cached();
  const std::size_t before = device.stats().reserved_bytes;
  set_device_memory_limit(Device::cuda(0), before + 64 * MiB);
  MemoryPhase phase("pass 1");
  std::vector<Tensor> held;
  std::string message;
  try {
    for (int i = 0; i < 8; ++i) held.push_back(Tensor::empty({4, 1024, 1024, 3}, DType::f32, Device::cuda(0)));
  } catch (const OutOfMemoryError& error) {
    message = error.what();
  }
  EXPECT_EQ(held.size(), 1u) << "48 MiB tensors under a 64 MiB cap";
  EXPECT_NE(message.find("during pass 1"), std::string::npos) << message;
  EXPECT_NE(message.find("[4,1024,1024,3] float32"), std::string::npos) << message;
  EXPECT_LE(device.stats().reserved_bytes, before + 64 * MiB);
  // Freed memory serves the next tensor of another shape under the same cap.
  held.clear();
  EXPECT_NO_THROW(held.push_back(Tensor::empty({60 * MiB / 4}, DType::f32, Device::cuda(0))));
  held.clear();
  set_device_memory_limit(Device::cuda(0), 0);
}

TEST(CudaAllocatorCap, HostHasNoCap) {
  EXPECT_THROW(set_device_memory_limit(Device::cpu(), MiB), Error);
}

}  // namespace
}  // namespace bigtrain
