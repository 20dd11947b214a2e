#pragma once
// Moving a host batch (decoded tiles) to the device the ops run on, without
// stalling the device. On CUDA the copy runs on the device's copy stream from a
// pinned staging buffer and overlaps compute; on the host backends nothing moves.
//
// The pattern that overlaps: upload batch k+1, then queue batch k's compute, then
// take batch k+1 with get() when its compute starts:
//   PendingUpload next = upload_async(backend, batch(0));
//   for k: Tensor x = next.get(); if (more) next = upload_async(backend, batch(k + 1)); compute(x);
#include <memory>

#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels {

class PendingUpload {
 public:
  PendingUpload();
  PendingUpload(PendingUpload&&) noexcept;
  PendingUpload& operator=(PendingUpload&&) noexcept;
  ~PendingUpload();

  // The tensor on the backend's device, ready for ops queued from now on (on CUDA:
  // the compute stream waits for the copy; the host does not).
  Tensor get();

  struct Impl;
  explicit PendingUpload(std::unique_ptr<Impl> impl);

 private:
  std::unique_ptr<Impl> impl_;
};

// `host` may be refilled as soon as this returns.
PendingUpload upload_async(Backend backend, const Tensor& host);

}  // namespace bigtrain::kernels
