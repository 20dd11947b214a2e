#pragma once
// One macro per library checks every status, naming the call, file and line.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "kernels/core/error.hpp"

namespace bigtrain::cuda {
[[noreturn]] void raise_status(const char* library, const char* call, const char* status, const char* file, int line);
}

#define BT_CUDA_CHECK(call)                                                                        \
  do {                                                                                             \
    cudaError_t bt_status_ = (call);                                                               \
    if (bt_status_ != cudaSuccess)                                                                 \
      ::bigtrain::cuda::raise_status("CUDA", #call, cudaGetErrorString(bt_status_), __FILE__, __LINE__); \
  } while (0)

#define BT_CUDNN_CHECK(call)                                                                       \
  do {                                                                                             \
    cudnnStatus_t bt_status_ = (call);                                                              \
    if (bt_status_ != CUDNN_STATUS_SUCCESS)                                                        \
      ::bigtrain::cuda::raise_status("cuDNN", #call, cudnnGetErrorString(bt_status_), __FILE__, __LINE__); \
  } while (0)

#define BT_CUBLAS_CHECK(call)                                                                      \
  do {                                                                                             \
    cublasStatus_t bt_status_ = (call);                                                             \
    if (bt_status_ != CUBLAS_STATUS_SUCCESS)                                                       \
      ::bigtrain::cuda::raise_status("cuBLAS", #call, cublasGetStatusString(bt_status_), __FILE__, __LINE__); \
  } while (0)

// After every kernel launch: catches bad launch configurations at the launch site.
#define BT_CUDA_CHECK_LAUNCH() BT_CUDA_CHECK(cudaGetLastError())
