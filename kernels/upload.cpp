#include "kernels/upload.hpp"

#include <optional>

#include "kernels/core/error.hpp"

#ifdef BIGTRAIN_HAVE_CUDA
#include "kernels/cuda/context.hpp"
#endif

namespace bigtrain::kernels {

struct PendingUpload::Impl {
  Tensor host;  // host backends: the tensor itself
#ifdef BIGTRAIN_HAVE_CUDA
  std::optional<cuda::Upload> device;
#endif
};

PendingUpload::PendingUpload() = default;
PendingUpload::PendingUpload(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PendingUpload::PendingUpload(PendingUpload&&) noexcept = default;
PendingUpload& PendingUpload::operator=(PendingUpload&&) noexcept = default;
PendingUpload::~PendingUpload() = default;

Tensor PendingUpload::get() {
  BT_CHECK(impl_ != nullptr, "PendingUpload::get on an empty upload");
#ifdef BIGTRAIN_HAVE_CUDA
  if (impl_->device) return impl_->device->get();
#endif
  return impl_->host;
}

PendingUpload upload_async(Backend backend, const Tensor& host) {
  BT_CHECK(host.defined() && host.device().is_cpu(), "upload_async: expected a host tensor, got {}",
           host.defined() ? host.describe() : std::string("an undefined tensor"));
  auto impl = std::make_unique<PendingUpload::Impl>();
  if (backend != Backend::cuda) {
    impl->host = host;
    return PendingUpload(std::move(impl));
  }
#ifdef BIGTRAIN_HAVE_CUDA
  impl->device.emplace(cuda::Context::of(backend_device(backend), "upload_async").upload_async(host));
  return PendingUpload(std::move(impl));
#else
  throw Error("upload_async: the cuda backend was requested, but this build has no CUDA backend");
#endif
}

}  // namespace bigtrain::kernels
