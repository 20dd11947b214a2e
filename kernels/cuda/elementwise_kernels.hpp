#pragma once
// Launch wrappers of the element-wise kernels (elementwise.cu). Plain C++ so the
// host code compiled by g++ can call them; each returns the launch status.
#include <cuda_runtime.h>

#include <cstdint>

namespace bigtrain::cuda::launch {

cudaError_t relu_forward(const float* x, float* y, std::int64_t n, cudaStream_t stream);
cudaError_t relu_backward(const float* y, const float* dy, float* dx, std::int64_t n, cudaStream_t stream);
cudaError_t add(const float* a, const float* b, float* out, std::int64_t n, cudaStream_t stream);
cudaError_t axpy(float alpha, const float* x, float* y, std::int64_t n, cudaStream_t stream);
cudaError_t scale(float alpha, float* x, std::int64_t n, cudaStream_t stream);

// Number of partial sums sum_of_squares writes (the size of its `partials` buffer).
inline constexpr int kReductionBlocks = 256;
// *result = sum x_i^2 in double, in a fixed order (deterministic run to run):
// kReductionBlocks partial sums, then one block adds those.
cudaError_t sum_of_squares(const float* x, std::int64_t n, double* partials, double* result, cudaStream_t stream);
// Sets *flag to 1 when some element is NaN or infinite; *flag must be 0 before.
cudaError_t flag_non_finite(const float* x, std::int64_t n, int* flag, cudaStream_t stream);

// Element i is kept when philox::uniform(seed, offset + i) >= p, exactly as the CPU.
cudaError_t dropout_forward(const float* x, float p, float keep_scale, std::uint64_t seed, std::uint64_t offset,
                            float* y, std::uint8_t* mask, std::int64_t n, cudaStream_t stream);
cudaError_t dropout_backward(const float* dy, const std::uint8_t* mask, float keep_scale, float* dx, std::int64_t n,
                             cudaStream_t stream);

}  // namespace bigtrain::cuda::launch
