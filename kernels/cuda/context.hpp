#pragma once
// The per-device state every CUDA op runs with: one compute stream, the cuDNN and
// cuBLAS handles bound to it, a shared workspace for cuDNN, and a copy stream with
// pinned staging buffers for host->device uploads that overlap compute.
//
// One Context per device for the whole process, not per thread: TBB runs a serial
// "device step" node on whichever worker thread is free, so a per-thread context
// would scatter consecutive batches over different streams and break the stream
// ordering that makes the caching allocator's reuse safe. The contract instead is:
// one thread at a time drives a device (the serial node), which is all that cuDNN
// and cuBLAS handles require (they may move between threads, not be used by two at
// once).
//
// Why all compute shares one stream: the caching allocator hands a freed block to
// the next request at once. Work on one stream runs in the order it was queued, so
// a block freed by the host while a kernel still reads it is only overwritten by
// later work on the same stream, after that kernel. Uploads on the copy stream are
// the one exception, and upload_async() orders them explicitly (see there).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "kernels/core/device.hpp"
#include "kernels/core/tensor.hpp"
#include "kernels/cuda/handles.hpp"

namespace bigtrain::cuda {

class Context;

// A host->device copy in flight on the copy stream. The device tensor may be read
// by compute work only after ready() (or get()): that queues a wait for the copy on
// the compute stream, without blocking the host. The destructor queues the same
// wait, so the tensor's memory is never handed back to the allocator while the
// copy may still be writing it.
class Upload {
 public:
  Upload(Upload&&) noexcept = default;
  Upload& operator=(Upload&&) noexcept;
  Upload(const Upload&) = delete;
  Upload& operator=(const Upload&) = delete;
  ~Upload();

  // Makes the compute stream wait for the copy; idempotent. Returns the tensor.
  const Tensor& get();
  // Blocks the host until the copy has finished (tests, benchmarks).
  void synchronize() const;
  cudaEvent_t event() const { return copied_ ? copied_->get() : nullptr; }

 private:
  friend class Context;
  Upload(Context* context, Tensor device, std::shared_ptr<Event> copied)
      : context_(context), device_(std::move(device)), copied_(std::move(copied)) {}
  void wait_on_compute();

  Context* context_ = nullptr;
  Tensor device_;
  std::shared_ptr<Event> copied_;
  bool waited_ = false;
};

class Context {
 public:
  // The context of a CUDA device, created on first use. Throws bigtrain::Error
  // naming the reason (no driver, no GPU, index out of range) when the device
  // cannot be used; `what` says who asked ("conv2d", "device: cuda").
  static Context& of(Device device, const char* what = "the CUDA backend");
  static Context& of_backend(const char* what) { return of(backend_device(Backend::cuda), what); }

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();

  Device device() const { return Device::cuda(index_); }
  // Makes this context's device current on the calling thread; every op entry calls it.
  void activate() const;
  cudaStream_t compute_stream() const { return compute_.get(); }
  cudaStream_t copy_stream() const { return copy_.get(); }
  cudnnHandle_t cudnn() const { return cudnn_.get(); }
  cublasHandle_t cublas() const { return cublas_.get(); }

  // Device scratch for cuDNN, at least `bytes` long, valid until the next call.
  // One buffer serves every op: they all run on the compute stream, one after the
  // other, so no two uses overlap. It grows to the largest request and stays
  // (counted by the device allocator, so peak-memory figures include it).
  void* workspace(std::size_t bytes);
  // The most workspace an algorithm may ask for when ops choose theirs; an op
  // whose fastest algorithm needs more takes the fastest one that fits.
  std::size_t workspace_limit() const { return workspace_limit_; }
  void set_workspace_limit(std::size_t bytes) { workspace_limit_ = bytes; }
  // Whether convolutions may use cuDNN's transform algorithms (Winograd, FFT).
  // Off by default: they round differently from a plain dot product (their error
  // is not the ~sqrt(K) eps of a summation that float32 tolerances assume), so
  // "float32" would mean something less exact. BIGTRAIN_CUDNN_ALGOS=all turns
  // them on for the process (set before the first op); ops read it at creation.
  bool allow_transform_algorithms() const { return allow_transform_algorithms_; }
  void set_allow_transform_algorithms(bool allow) { allow_transform_algorithms_ = allow; }
  // Whether convolutions take the heuristics' fastest algorithm even when it is not
  // deterministic (cuDNN's atomics-based backward-filter and backward-data
  // algorithms), as PyTorch does with cudnn.deterministic off. Off by default: a GPU
  // run then repeats bit for bit. BIGTRAIN_CUDNN_ALGOS=fastest turns this and the
  // transform algorithms on, to measure what determinism costs (scripts/bench_gpu).
  bool prefer_deterministic_algorithms() const { return prefer_deterministic_algorithms_; }
  void set_prefer_deterministic_algorithms(bool prefer) { prefer_deterministic_algorithms_ = prefer; }

  // Copies a host tensor to a new device tensor on the copy stream and returns at
  // once (after copying the host data into a pinned staging buffer, so `host` may
  // be reused immediately). Before writing, the copy waits for all compute work
  // queued so far: the new tensor's memory may have been freed by a kernel that
  // has not run yet. To overlap, upload batch k+1 BEFORE queueing batch k's
  // compute, then call get() when batch k+1's compute starts.
  Upload upload_async(const Tensor& host);

  // Blocks the host until all queued compute has finished.
  void synchronize() const;

 private:
  explicit Context(int index);

  // Two staging slots: upload k+1 fills one while upload k's DMA reads the other.
  struct StagingSlot {
    PinnedBuffer pinned;
    std::shared_ptr<Event> copied;  // recorded on the copy stream after the DMA from `pinned`
  };

  int index_;
  Stream compute_, copy_;
  CudnnHandle cudnn_;
  CublasHandle cublas_;
  Event compute_mark_;  // recorded on compute before each upload; the copy stream waits on it
  Tensor workspace_;
  std::size_t workspace_limit_ = std::size_t{256} << 20;
  bool allow_transform_algorithms_ = false;
  bool prefer_deterministic_algorithms_ = true;
  StagingSlot slots_[2];
  int next_slot_ = 0;
  std::mutex upload_mutex_;  // upload_async may be called from a reader thread
};

}  // namespace bigtrain::cuda
