#include "pipeline/distributed/distributed_nccl.hpp"

#ifdef BIGTRAIN_HAVE_NCCL
#include <chrono>
#include <cstdio>
#include <vector>

#include <fmt/format.h>

#include "kernels/core/error.hpp"
#include "kernels/cuda/context.hpp"
#include "pipeline/distributed/gradient_buckets.hpp"
#include "pipeline/distributed/nccl_check.hpp"

namespace bigtrain {
std::string cuda_bus_id(Device device) {
  char id[32] = {};
  BT_CUDA_CHECK(cudaDeviceGetPCIBusId(id, static_cast<int>(sizeof id), device.index));
  return id;
}

NcclCommunicator::NcclCommunicator(Communicator& host, Device device, double timeout_seconds)
    : host_(host), device_(device), timeout_seconds_(timeout_seconds) {
  BT_CHECK(device.is_cuda(), "NCCL communicator on {}: needs a CUDA device", device.str());
  cuda::Context& context = cuda::Context::of(device, "NCCL gradient allreduce");
  context.activate();  // NCCL binds the communicator to the current device
  stream_ = context.compute_stream();
  ncclUniqueId id{};
  if (host.is_root()) BT_NCCL_CHECK(ncclGetUniqueId(&id));
  host.broadcast({reinterpret_cast<std::byte*>(&id), sizeof id}, 0);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  BT_NCCL_CHECK(ncclCommInitRankConfig(&comm_, host.size(), id, host.rank(), &config));
  try {
    wait_ready("ncclCommInitRankConfig");
  } catch (...) {
    abort();  // the destructor does not run for a half-made communicator
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr) return;
  if (aborted_.load()) return;  // ncclCommAbort freed it
  // No collective is in flight (allreduce_sum returns only when done), so finalize
  // has nothing to wait for; an error here must not escape a destructor.
  try {
    BT_CUDA_CHECK(cudaSetDevice(device_.index));
    BT_NCCL_CHECK(ncclCommFinalize(comm_));
    wait_ready("ncclCommFinalize");
    BT_NCCL_CHECK(ncclCommDestroy(comm_));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "bigtrain: closing the NCCL communicator: %s\n", error.what());
    abort();
  }
}

void NcclCommunicator::allreduce_sum(std::span<const DeviceBuffer> buffers) {
  BT_CHECK(!aborted_.load(), "NCCL allreduce on an aborted communicator");
  busy_thread_.store(std::this_thread::get_id());
  struct Idle {
    std::atomic<std::thread::id>& busy;
    ~Idle() { busy.store(std::thread::id()); }
  } idle{busy_thread_};

  BT_CUDA_CHECK(cudaSetDevice(device_.index));
  std::vector<std::size_t> sizes;
  sizes.reserve(buffers.size());
  for (const DeviceBuffer& b : buffers) sizes.push_back(b.count);
  for (const GradientBucket& bucket : bucket_gradients(sizes, kNcclBucketElements)) {
    if (bucket.elements == 0) continue;
    float* data = buffers[bucket.first].data;
    if (bucket.staged()) {
      if (!staging_.defined())
        staging_ = Tensor::empty({static_cast<std::int64_t>(kNcclBucketElements)}, DType::f32, device_);
      data = staging_.data<float>();
      std::size_t offset = 0;
      for (std::size_t i = bucket.first; i < bucket.end; ++i) {
        BT_CUDA_CHECK(cudaMemcpyAsync(data + offset, buffers[i].data, buffers[i].count * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream_));
        offset += buffers[i].count;
      }
    }
    // Sum, not average: each rank's loss already carries the global 1/images_per_step
    // (see distributed_training.hpp), so the sum is the single-process gradient.
    BT_NCCL_CHECK(ncclAllReduce(data, data, bucket.elements, ncclFloat, ncclSum, comm_, stream_));
    wait_ready("ncclAllReduce");
    if (bucket.staged()) {
      std::size_t offset = 0;
      for (std::size_t i = bucket.first; i < bucket.end; ++i) {
        BT_CUDA_CHECK(cudaMemcpyAsync(buffers[i].data, data + offset, buffers[i].count * sizeof(float),
                                      cudaMemcpyDeviceToDevice, stream_));
        offset += buffers[i].count;
      }
    }
  }
  wait_stream("ncclAllReduce");
}

std::string NcclCommunicator::description() const {
  int version = 0;
  BT_NCCL_CHECK(ncclGetVersion(&version));
  // NCCL_VERSION_CODE is X*1000+Y*100+Z up to 2.8 and X*10000+Y*100+Z after.
  const int major = version >= 10000 ? version / 10000 : version / 1000;
  const int minor = version >= 10000 ? version / 100 % 100 : version / 100 % 10;
  return fmt::format("NCCL {}.{}.{} over {} ranks", major, minor, version % 100, host_.size());
}

void NcclCommunicator::abort() noexcept {
  const std::thread::id busy = busy_thread_.load();
  if (busy != std::thread::id() && busy != std::this_thread::get_id()) return;
  if (comm_ == nullptr || aborted_.exchange(true)) return;
  ncclCommAbort(comm_);
}

// Until the last (non-blocking) NCCL call on the communicator has been issued.
void NcclCommunicator::wait_ready(const char* call) {
  poll(call, [] { return true; });
}

// Until the device has run everything queued on the stream (the collective included).
void NcclCommunicator::wait_stream(const char* call) {
  poll(call, [&] {
    const cudaError_t status = cudaStreamQuery(stream_);
    if (status == cudaErrorNotReady) return false;
    BT_CUDA_CHECK(status);
    return true;
  });
}

template <class Done>
void NcclCommunicator::poll(const char* call, Done done) {
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  for (;;) {
    ncclResult_t state = ncclSuccess;
    BT_NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
    if (state != ncclSuccess && state != ncclInProgress)
      throw Error(fmt::format("{} failed on rank {}: {} ({})", call, host_.rank(), ncclGetErrorString(state),
                              ncclGetLastError(comm_)));
    if (state == ncclSuccess && done()) return;
    const double waited = std::chrono::duration<double>(Clock::now() - started).count();
    if (timeout_seconds_ > 0 && waited > timeout_seconds_) {
      abort();
      host_.abort(fmt::format("{} has waited {:.0f} s for the other ranks (BIGTRAIN_COLLECTIVE_TIMEOUT_S={:.0f}): "
                              "a rank hangs or died",
                              call, waited, timeout_seconds_));
    }
    // A collective takes milliseconds: 100 us of sleep adds little to that and
    // leaves the core to the data pipeline's threads instead of spinning.
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

}  // namespace bigtrain
#endif  // BIGTRAIN_HAVE_NCCL
