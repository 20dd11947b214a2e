#include "kernels/cuda/context.hpp"

#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "kernels/core/cudnn_algorithm_policy.hpp"
#include "kernels/core/error.hpp"
#include "kernels/cuda/runtime.hpp"

namespace bigtrain::cuda {

// ---- Upload --------------------------------------------------------------------

Upload& Upload::operator=(Upload&& other) noexcept {
  if (this != &other) {
    wait_on_compute();
    context_ = std::exchange(other.context_, nullptr);
    device_ = std::move(other.device_);
    copied_ = std::move(other.copied_);
    waited_ = std::exchange(other.waited_, true);
  }
  return *this;
}

Upload::~Upload() { wait_on_compute(); }

void Upload::wait_on_compute() {
  if (waited_ || context_ == nullptr || !copied_) return;
  waited_ = true;
  // Cannot throw from a destructor; a failure here means the device is already in
  // a sticky error state that the next checked call reports.
  (void)cudaStreamWaitEvent(context_->compute_stream(), copied_->get(), 0);
}

const Tensor& Upload::get() {
  if (!waited_ && context_ != nullptr && copied_) {
    context_->activate();
    BT_CUDA_CHECK(cudaStreamWaitEvent(context_->compute_stream(), copied_->get(), 0));
    waited_ = true;
  }
  return device_;
}

void Upload::synchronize() const {
  if (copied_) BT_CUDA_CHECK(cudaEventSynchronize(copied_->get()));
}

// ---- Context -------------------------------------------------------------------

Context& Context::of(Device device, const char* what) {
  BT_CHECK(device.is_cuda(), "{}: {} is not a CUDA device", what, device.str());
  const int count = device_count();
  if (count == 0) {
    throw Error(fmt::format("{} needs a CUDA GPU, but none can be used: {}", what, unavailable_reason()));
  }
  BT_CHECK(device.index >= 0 && device.index < count, "{}: CUDA device {} requested, but this machine has {}", what,
           device.index, count);
  // Created once per device and kept for the life of the process (handles are
  // expensive to create; destroying them at exit races the driver's own teardown).
  static std::mutex mutex;
  static std::vector<Context*> contexts;
  std::lock_guard lock(mutex);
  if (contexts.empty()) contexts.resize(static_cast<std::size_t>(count), nullptr);
  Context*& slot = contexts[static_cast<std::size_t>(device.index)];
  if (slot == nullptr) slot = new Context(device.index);  // intentionally never deleted, see above
  slot->activate();
  return *slot;
}

namespace {
// Selects the device before any member (stream, handle) is created on it.
int select_device(int index) {
  BT_CUDA_CHECK(cudaSetDevice(index));
  return index;
}
}  // namespace

Context::Context(int index) : index_(select_device(index)) {
  BT_CUDNN_CHECK(cudnnSetStream(cudnn_.get(), compute_.get()));
  BT_CUBLAS_CHECK(cublasSetStream(cublas_.get(), compute_.get()));
  // Plain float32 arithmetic: no TF32 tensor-core rounding behind the caller's
  // back, so results match the CPU within float tolerances.
  BT_CUBLAS_CHECK(cublasSetMathMode(cublas_.get(), CUBLAS_DEFAULT_MATH));
  for (auto& slot : slots_) slot.copied = std::make_shared<Event>();
  const CudnnAlgorithmPolicy policy = cudnn_algorithm_policy(std::getenv("BIGTRAIN_CUDNN_ALGOS"));
  allow_transform_algorithms_ = policy.allow_transforms;
  prefer_deterministic_algorithms_ = policy.prefer_deterministic;
}

Context::~Context() = default;

void Context::activate() const { BT_CUDA_CHECK(cudaSetDevice(index_)); }

void Context::synchronize() const {
  activate();
  BT_CUDA_CHECK(cudaStreamSynchronize(compute_.get()));
}

void* Context::workspace(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  if (!workspace_.defined() || workspace_.nbytes() < bytes) {
    // The old buffer goes back to the allocator; the next user of that block is
    // queued on this same stream, after every op that used it as workspace.
    workspace_ = Tensor();
    workspace_ = Tensor::empty({static_cast<std::int64_t>(bytes)}, DType::u8, device());
  }
  return workspace_.raw_data();
}

Upload Context::upload_async(const Tensor& host) {
  BT_CHECK(host.defined() && host.device().is_cpu(), "upload_async: expected a host tensor, got {}",
           host.defined() ? host.describe() : std::string("an undefined tensor"));
  activate();
  Tensor device_tensor = Tensor::empty(host.shape(), host.dtype(), device());
  const std::size_t bytes = host.nbytes();
  if (bytes == 0) return Upload(this, std::move(device_tensor), nullptr);

  std::lock_guard lock(upload_mutex_);
  StagingSlot& slot = slots_[next_slot_];
  next_slot_ = 1 - next_slot_;
  // The slot's previous DMA must have read the pinned buffer before it is refilled
  // (or freed, when it grows). Two slots: this waits for upload k-2, long done.
  BT_CUDA_CHECK(cudaEventSynchronize(slot.copied->get()));
  if (slot.pinned.bytes() < bytes) slot.pinned = PinnedBuffer(bytes);
  std::memcpy(slot.pinned.data(), host.raw_data(), bytes);

  // Everything queued on compute so far may still use the memory device_tensor
  // just received from the allocator: the copy waits for it.
  BT_CUDA_CHECK(cudaEventRecord(compute_mark_.get(), compute_.get()));
  BT_CUDA_CHECK(cudaStreamWaitEvent(copy_.get(), compute_mark_.get(), 0));
  BT_CUDA_CHECK(
      cudaMemcpyAsync(device_tensor.raw_data(), slot.pinned.data(), bytes, cudaMemcpyHostToDevice, copy_.get()));
  // A fresh event per upload, shared with the slot: the Upload's wait must refer to
  // this copy even after the slot has been reused for a later one.
  auto copied = std::make_shared<Event>();
  BT_CUDA_CHECK(cudaEventRecord(copied->get(), copy_.get()));
  slot.copied = copied;
  return Upload(this, std::move(device_tensor), std::move(copied));
}

}  // namespace bigtrain::cuda
