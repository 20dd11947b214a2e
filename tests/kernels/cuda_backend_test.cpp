// The CUDA backend's own machinery: choosing the device from the configuration,
// the errors without a GPU, and the per-device context (uploads on the copy
// stream that overlap compute, the shared workspace). Op results are checked by
// the op tests, which run every backend (cuda included) against the reference.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "kernels/aggregation.hpp"
#include "kernels/conv2d.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/core/error.hpp"
#include "kernels/device_select.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/upload.hpp"
#include "tests/support/op_check.hpp"

#ifdef BIGTRAIN_HAVE_CUDA
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/runtime.hpp"
#endif

namespace bigtrain::kernels {
namespace {

using testing::random_tensor;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

TEST(DeviceSelect, CpuAndAutoAlwaysResolve) {
  EXPECT_EQ(select_backend("cpu"), Backend::cpu);
  EXPECT_EQ(select_backend("auto"), cuda_device_count() > 0 ? Backend::cuda : Backend::cpu);
  const std::string message = error_of([] { select_backend("gpu"); });
  EXPECT_NE(message.find("'gpu'"), std::string::npos) << message;
  EXPECT_NE(message.find("cpu, cuda, auto"), std::string::npos) << message;
}

TEST(DeviceSelect, CudaWithoutAGpuIsAnErrorSayingWhy) {
  if (cuda_device_count() > 0) {
    EXPECT_EQ(select_backend("cuda"), Backend::cuda);
    GTEST_SKIP() << "hardware: a GPU is present, so the no-GPU error cannot be provoked here (the cuda choice was checked)";
  }
  const std::string message = error_of([] { select_backend("cuda"); });
  ASSERT_FALSE(message.empty()) << "device: cuda without a GPU must throw bigtrain::Error";
  EXPECT_NE(message.find("device: cuda"), std::string::npos) << message;
#ifdef BIGTRAIN_HAVE_CUDA
  EXPECT_NE(message.find(cuda::unavailable_reason()), std::string::npos) << message;
#else
  EXPECT_NE(message.find("no CUDA backend"), std::string::npos) << message;
#endif
  EXPECT_NE(describe_backend_choice(Backend::cpu).find("cuda:"), std::string::npos);
}

// Asking an op for the cuda backend on a machine without a GPU names the reason
// instead of failing inside a CUDA call.
TEST(CudaOpsWithoutGpu, CreatingAnOpNamesTheReason) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "hardware: a GPU is present, so the no-GPU error cannot be provoked here";
  Conv2dSpec spec;
  spec.in_channels = 2, spec.out_channels = 3, spec.in_h = 5, spec.in_w = 5, spec.kernel_h = 3, spec.kernel_w = 3;
  const std::string message = error_of([&] { make_conv2d(Backend::cuda, spec); });
  ASSERT_FALSE(message.empty());
  EXPECT_NE(message.find("conv2d"), std::string::npos) << message;
#ifdef BIGTRAIN_HAVE_CUDA
  EXPECT_NE(message.find(cuda::unavailable_reason()), std::string::npos) << message;
#endif
  // A device tensor cannot be made either, and says so.
  const std::string tensor_message = error_of([] { Tensor::empty({4}, DType::f32, Device::cuda()); });
  EXPECT_NE(tensor_message.find("cuda"), std::string::npos) << tensor_message;
}

// The device-neutral upload the pipeline uses: a no-op share on the host
// backends, a copy on the copy stream for cuda.
TEST(Upload, HostBackendsShareTheTensorAndCudaCopiesIt) {
  const Tensor host = random_tensor({2, 3, 5}, 3);
  for (Backend backend : {Backend::reference, Backend::cpu}) {
    PendingUpload upload = upload_async(backend, host);
    const Tensor same = upload.get();
    EXPECT_EQ(same.raw_data(), host.raw_data()) << backend_name(backend);
  }
  EXPECT_THROW(upload_async(Backend::cpu, Tensor()), Error);
  if (auto reason = testing::backend_unavailable(Backend::cuda)) GTEST_SKIP() << *reason << " (the cpu and reference parts above ran)";
  PendingUpload upload = upload_async(Backend::cuda, host);
  const Tensor device = upload.get();
  EXPECT_TRUE(device.device().is_cuda());
  EXPECT_EQ(device.to_vector(), host.to_vector());
}

#ifdef BIGTRAIN_HAVE_CUDA

class CudaContext : public ::testing::Test {
 protected:
  void SetUp() override { BT_SKIP_UNLESS_AVAILABLE(Backend::cuda); }
};

TEST_F(CudaContext, UploadCopiesEveryDtypeExactly) {
  cuda::Context& context = cuda::Context::of(Device::cuda(0));
  const Tensor values = random_tensor({3, 5, 7}, 1);
  cuda::Upload upload = context.upload_async(values);
  EXPECT_EQ(upload.get().device(), Device::cuda(0));
  EXPECT_EQ(upload.get().to_vector(), values.to_vector());

  Tensor bytes = Tensor::empty({1001}, DType::u8);
  for (std::int64_t i = 0; i < bytes.numel(); ++i) bytes.data<std::uint8_t>()[i] = static_cast<std::uint8_t>(i * 7);
  cuda::Upload byte_upload = context.upload_async(bytes);
  const Tensor back = byte_upload.get().to(Device::cpu());
  for (std::int64_t i = 0; i < bytes.numel(); ++i)
    ASSERT_EQ(back.data<std::uint8_t>()[i], bytes.data<std::uint8_t>()[i]) << i;

  cuda::Upload empty = context.upload_async(Tensor::empty({0}));
  EXPECT_EQ(empty.get().numel(), 0);
  EXPECT_THROW(context.upload_async(values.to(Device::cuda(0))), Error);  // the source must be on the host
}

// The pipelining pattern the trainer uses: upload batch k+1, queue compute on
// batch k, then take batch k+1. The host buffer is reused at once (the staging
// copy owns the data), and every batch arrives intact while compute runs.
TEST_F(CudaContext, PipelinedUploadsOverlapComputeAndStayCorrect) {
  cuda::Context& context = cuda::Context::of(Device::cuda(0));
  constexpr int kBatches = 6;
  const Shape shape{4, 3, 64, 64};
  Tensor host = Tensor::empty(shape);  // one host buffer, refilled for every batch
  auto fill = [&](int batch) {
    for (std::int64_t i = 0; i < host.numel(); ++i) host.f32()[i] = static_cast<float>(batch * 1000 + i % 997);
  };
  fill(0);
  cuda::Upload next = context.upload_async(host);
  std::vector<Tensor> results;
  for (int batch = 0; batch < kBatches; ++batch) {
    Tensor current = next.get();
    if (batch + 1 < kBatches) {
      fill(batch + 1);
      next = context.upload_async(host);  // queued before batch's compute: may overlap it
    }
    Tensor doubled = Tensor::empty(shape, DType::f32, Device::cuda(0));
    add(Backend::cuda, current, current, doubled);
    results.push_back(doubled);
  }
  for (int batch = 0; batch < kBatches; ++batch) {
    const std::vector<float> got = results[static_cast<std::size_t>(batch)].to_vector();
    for (std::size_t i = 0; i < got.size(); i += 131)
      ASSERT_EQ(got[i], 2.0f * static_cast<float>(batch * 1000 + static_cast<std::int64_t>(i) % 997))
          << "batch " << batch << " element " << i;
  }
}

TEST_F(CudaContext, WorkspaceGrowsAndIsCounted) {
  cuda::Context& context = cuda::Context::of(Device::cuda(0));
  EXPECT_EQ(context.workspace(0), nullptr);
  // Larger than any convolution may ask for (the default limit is 256 MiB), so it grows now.
  const std::size_t large = std::size_t{300} << 20;
  void* buffer = context.workspace(large);
  ASSERT_NE(buffer, nullptr);
  EXPECT_EQ(context.workspace(1024), buffer) << "a smaller request reuses the buffer";
  EXPECT_GE(allocator_for(Device::cuda(0)).stats().current_bytes, large)
      << "the workspace is device memory from the counted allocator";
  context.synchronize();
}

// Targets live on the device but are checked on the host, with the CPU's message.
TEST_F(CudaContext, CrossEntropyRejectsATargetOutOfRange) {
  const Tensor logits = random_tensor({4, 3}, 5, -1.0f, 1.0f, Device::cuda(0));
  Tensor targets = Tensor::zeros({4}, DType::i32);
  targets.data<std::int32_t>()[2] = 3;
  Tensor grad = Tensor::empty({4, 3}, DType::f32, Device::cuda(0));
  const std::string message =
      error_of([&] { cross_entropy(Backend::cuda, logits, targets.to(Device::cuda(0)), nullptr, {}, grad); });
  EXPECT_NE(message.find("target 3 of sample 2 is outside [0, 3)"), std::string::npos) << message;
}

// An argmax row outside H is an error on the device too, as on the host backends.
TEST_F(CudaContext, MaxRowsBackwardRejectsAnArgmaxOutsideTheRows) {
  Tensor argmax = Tensor::zeros({3}, DType::i32);
  argmax.data<std::int32_t>()[0] = 7;
  const Tensor dz = random_tensor({3}, 6, -1.0f, 1.0f, Device::cuda(0));
  Tensor dh = Tensor::empty({4, 3}, DType::f32, Device::cuda(0));
  const std::string message =
      error_of([&] { max_rows_backward(Backend::cuda, dz, argmax.to(Device::cuda(0)), dh); });
  EXPECT_NE(message.find("argmax[0] = 7 is not a row of 4 rows"), std::string::npos) << message;
}

#endif  // BIGTRAIN_HAVE_CUDA

}  // namespace
}  // namespace bigtrain::kernels
