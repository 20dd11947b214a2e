#pragma once
// Where a caching allocator gets its memory from: cudaMalloc/cudaFree for a GPU
// (kernels/cuda/runtime.cpp), aligned host memory for the tests of the caching logic.
// Failure is a null pointer, not an exception: the caller answers it by returning
// its cached blocks and trying once more.
#include <cstddef>
#include <string>

namespace bigtrain {

class SystemAllocator {
 public:
  virtual ~SystemAllocator() = default;
  // nullptr when the system has no memory for `bytes`.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void free(void* ptr, std::size_t bytes) = 0;
  // Why the last allocate() returned nullptr ("cudaMalloc: out of memory"), for errors.
  virtual std::string last_failure() const = 0;
};

// Host memory (64-byte aligned) with an optional capacity, beyond which allocate()
// fails as a full device would. Stands in for a GPU where the caching logic is
// tested; counts its calls so tests see what reached the "system".
class HostSystemAllocator final : public SystemAllocator {
 public:
  explicit HostSystemAllocator(std::size_t capacity = 0) : capacity_(capacity) {}
  ~HostSystemAllocator() override = default;
  void* allocate(std::size_t bytes) override;
  void free(void* ptr, std::size_t bytes) override;
  std::string last_failure() const override { return last_failure_; }

  std::size_t outstanding_bytes() const { return outstanding_; }
  std::size_t allocations() const { return allocations_; }
  std::size_t frees() const { return frees_; }
  std::size_t failures() const { return failures_; }

 private:
  std::size_t capacity_;  // 0: unlimited
  std::size_t outstanding_ = 0;
  std::size_t allocations_ = 0, frees_ = 0, failures_ = 0;
  std::string last_failure_;
};

}  // namespace bigtrain
