#pragma once
// The GPU path of the gradient allreduce: NCCL on CUDA tensors (builds with
// BIGTRAIN_HAVE_NCCL only). Internal to the MPI communicator
// (Communicator::allreduce_sum_on_device); everything else uses world().
#include <atomic>
#include <cstddef>
#include <span>
#include <string>
#include <thread>

#include "kernels/core/device.hpp"
#include "kernels/core/tensor.hpp"
#include "pipeline/distributed/distributed.hpp"

#ifdef BIGTRAIN_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>

namespace bigtrain {

// The PCI bus id of a CUDA device ("0000:3b:00.0"): identifies one physical GPU
// across processes, whatever CUDA_VISIBLE_DEVICES each one sees.
std::string cuda_bus_id(Device device);

// One NCCL communicator over all ranks of `host`, on this rank's `device`, made once
// per run. The constructor is collective: rank 0 makes the unique id, `host`
// broadcasts it, every rank joins with its own device (NCCL refuses two ranks on one
// GPU). Collectives run on the device's compute stream (cuda::Context), so they are
// ordered after the backward pass that wrote the gradients and before the optimizer
// step that reads them, and the caching allocator's one-stream reuse rule holds.
//
// Never blocks in NCCL: the communicator is non-blocking and every wait polls
// ncclCommGetAsyncError and the stream. A peer that died or hangs makes the wait
// end after `timeout_seconds` (0: never) by aborting the communicator and the job
// through host.abort(); an asynchronous NCCL error throws an Error naming the call.
class NcclCommunicator {
 public:
  NcclCommunicator(Communicator& host, Device device, double timeout_seconds);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // Element-wise sum over ranks of every buffer, in place, in as many ncclAllReduce
  // calls as bucket_gradients makes (ResNet-50: 2); returns when done.
  void allreduce_sum(std::span<const DeviceBuffer> buffers);
  Device device() const { return device_; }
  // "NCCL 2.28.9 over 2 ranks"
  std::string description() const;
  // ncclCommAbort, once. Called by the thread that is inside allreduce_sum, or by
  // another one while no thread is (the MPI watchdog fires only while this rank is
  // inside an MPI call); otherwise it leaves the communicator to that thread's own
  // timeout, since the job is being ended by MPI_Abort anyway.
  void abort() noexcept;

 private:
  void wait_ready(const char* call);
  void wait_stream(const char* call);
  template <class Done>
  void poll(const char* call, Done done);

  Communicator& host_;
  Device device_;
  double timeout_seconds_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  Tensor staging_;  // one bucket's worth of floats on the device, made on first need
  std::atomic<bool> aborted_{false};
  std::atomic<std::thread::id> busy_thread_{};
};

}  // namespace bigtrain
#endif  // BIGTRAIN_HAVE_NCCL
