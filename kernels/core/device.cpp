#include "kernels/core/device.hpp"

#include <atomic>

#include <fmt/format.h>

#include "kernels/core/error.hpp"

#ifdef BIGTRAIN_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif

namespace bigtrain {

std::string Device::str() const {
  return is_cpu() ? std::string("cpu") : fmt::format("cuda:{}", index);
}

const char* backend_name(Backend backend) {
  switch (backend) {
    case Backend::reference: return "reference";
    case Backend::cpu: return "cpu";
    case Backend::cuda: return "cuda";
  }
  return "?";
}

namespace {
std::atomic<int> cuda_backend_index{0};
}

Device backend_device(Backend backend) {
  return backend == Backend::cuda ? Device::cuda(cuda_backend_index.load()) : Device::cpu();
}

void set_cuda_backend_device(int index) {
  BT_CHECK(index >= 0, "CUDA device index {} is negative", index);
  cuda_backend_index.store(index);
}

bool cuda_compiled() {
#ifdef BIGTRAIN_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device_count() {
#ifdef BIGTRAIN_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::bf16:
    case DType::f16: return 2;
    case DType::u8: return 1;
    case DType::i32: return 4;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::u8: return "uint8";
    case DType::i32: return "int32";
  }
  return "?";
}

}  // namespace bigtrain
