#pragma once
// RAII owners for CUDA, cuDNN and cuBLAS objects: each creates in its constructor,
// checks the status, and destroys in its destructor. Move-only. Destruction
// ignores the status (a destructor must not throw, and a failing destroy after a
// sticky device error adds nothing the earlier error did not say).
#include <cstddef>
#include <cstdint>
#include <utility>

#include "kernels/cuda/check.hpp"

namespace bigtrain::cuda {

// Owns one handle of type T, destroyed with Destroy; Create is run by the subclass.
template <typename T, auto Destroy>
class Owned {
 public:
  Owned() = default;
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  Owned(Owned&& other) noexcept : handle_(std::exchange(other.handle_, T{})) {}
  Owned& operator=(Owned&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, T{});
    }
    return *this;
  }
  ~Owned() { reset(); }
  T get() const { return handle_; }
  explicit operator bool() const { return handle_ != T{}; }

 protected:
  T* out() { return &handle_; }

 private:
  void reset() {
    if (handle_ != T{}) (void)Destroy(std::exchange(handle_, T{}));
  }
  T handle_{};
};

// A stream that synchronises with the legacy default stream (cudaStreamDefault
// flags): synchronous cudaMemcpy/cudaMemset calls elsewhere (Tensor::to, zero)
// then order themselves after all work queued on it, so host reads never race.
class Stream : public Owned<cudaStream_t, cudaStreamDestroy> {
 public:
  Stream() { BT_CUDA_CHECK(cudaStreamCreateWithFlags(out(), cudaStreamDefault)); }
};

// Timing is off: these events only order work, and timing-free events are cheaper.
class Event : public Owned<cudaEvent_t, cudaEventDestroy> {
 public:
  Event() { BT_CUDA_CHECK(cudaEventCreateWithFlags(out(), cudaEventDisableTiming)); }
};

// For kernel timing in benchmarks.
class TimingEvent : public Owned<cudaEvent_t, cudaEventDestroy> {
 public:
  TimingEvent() { BT_CUDA_CHECK(cudaEventCreate(out())); }
};

class CudnnHandle : public Owned<cudnnHandle_t, cudnnDestroy> {
 public:
  CudnnHandle() { BT_CUDNN_CHECK(cudnnCreate(out())); }
};

class CublasHandle : public Owned<cublasHandle_t, cublasDestroy> {
 public:
  CublasHandle() { BT_CUBLAS_CHECK(cublasCreate(out())); }
};

class TensorDescriptor : public Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor> {
 public:
  TensorDescriptor() { BT_CUDNN_CHECK(cudnnCreateTensorDescriptor(out())); }
};

class FilterDescriptor : public Owned<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor> {
 public:
  FilterDescriptor() { BT_CUDNN_CHECK(cudnnCreateFilterDescriptor(out())); }
};

class ConvolutionDescriptor : public Owned<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor> {
 public:
  ConvolutionDescriptor() { BT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(out())); }
};

// Page-locked host memory: the only source from which cudaMemcpyAsync is truly
// asynchronous, so uploads can overlap compute.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t bytes) : bytes_(bytes) {
    if (bytes > 0) BT_CUDA_CHECK(cudaMallocHost(&data_, bytes));
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
  }
  ~PinnedBuffer() { release(); }
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void release() {
    if (data_ != nullptr) (void)cudaFreeHost(std::exchange(data_, nullptr));
    bytes_ = 0;
  }
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace bigtrain::cuda
