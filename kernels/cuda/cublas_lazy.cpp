#include "kernels/cuda/cublas_lazy.hpp"

#include <dlfcn.h>

#include <cublas_v2.h>

#include <fmt/format.h>

#include "kernels/core/error.hpp"

namespace bigtrain::cuda {

namespace {

void* cublas_library() {
  static void* const library = [] {
    void* handle = dlopen(BIGTRAIN_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr)
      throw Error(fmt::format("cuBLAS: cannot load {} ({}); the CUDA backend needs the cuBLAS of the toolkit "
                              "bigtrain was built with",
                              BIGTRAIN_CUBLAS_SONAME, dlerror()));
    return handle;
  }();
  return library;
}

void* find(const char* name) { return dlsym(cublas_library(), name); }

template <typename Function>
Function* resolve(const char* name) {
  void* symbol = find(name);
  if (symbol == nullptr) throw Error(fmt::format("cuBLAS: {} has no function {}", BIGTRAIN_CUBLAS_SONAME, name));
  return reinterpret_cast<Function*>(symbol);
}

// Every function below, by the name the library exports (cublas_v2.h maps
// cublasCreate to cublasCreate_v2 and so on).
constexpr const char* kFunctions[] = {"cublasCreate_v2",   "cublasDestroy_v2", "cublasSetStream_v2",
                                      "cublasSetMathMode", "cublasSgemm_v2",   "cublasGemmEx",
                                      "cublasGetStatusString"};

}  // namespace

const char* cublas_library_name() { return BIGTRAIN_CUBLAS_SONAME; }

std::vector<std::string> unresolved_cublas_functions() {
  std::vector<std::string> missing;
  for (const char* name : kFunctions)
    if (find(name) == nullptr) missing.emplace_back(name);
  return missing;
}

}  // namespace bigtrain::cuda

// The declarations are cuBLAS's own (cublas_api.h), so a signature that differs from
// the header's does not compile.
using bigtrain::cuda::resolve;

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  static auto* const real = resolve<decltype(cublasCreate_v2)>("cublasCreate_v2");
  return real(handle);
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  static auto* const real = resolve<decltype(cublasDestroy_v2)>("cublasDestroy_v2");
  return real(handle);
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  static auto* const real = resolve<decltype(cublasSetStream_v2)>("cublasSetStream_v2");
  return real(handle, stream);
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  static auto* const real = resolve<decltype(cublasSetMathMode)>("cublasSetMathMode");
  return real(handle, mode);
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float* alpha, const float* A, int lda, const float* B, int ldb,
                              const float* beta, float* C, int ldc) {
  static auto* const real = resolve<decltype(cublasSgemm_v2)>("cublasSgemm_v2");
  return real(handle, transa, transb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  using Signature = cublasStatus_t(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                   const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                   cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  static auto* const real = resolve<Signature>("cublasGemmEx");
  return real(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc, computeType,
              algo);
}

// Used by the error check, which may run before the library is loaded.
const char* cublasGetStatusString(cublasStatus_t status) {
  try {
    static auto* const real = resolve<decltype(cublasGetStatusString)>("cublasGetStatusString");
    return real(status);
  } catch (const std::exception&) {
    return "unknown status (cuBLAS could not be loaded)";
  }
}

}  // extern "C"
