#pragma once
// Launch wrapper of the softmax cross-entropy kernel (cross_entropy.cu).
#include <cuda_runtime.h>

#include <cstdint>

namespace bigtrain::cuda::launch {

// The scalars every row shares, formed on the host in double as the CPU does.
struct CrossEntropyCoefficients {
  float nll = 0.0f;     // (1 - smoothing) / sum_n w[t_n]
  float smooth = 0.0f;  // smoothing / C / sum_n w[t_n]
  float total_weight = 0.0f;  // sum_c w[c]
};

// Per row n (one thread each, the CPU's float loop): dlogits[n, :], probabilities
// (may be null) and row_loss[n] (double), whose sum is the loss.
cudaError_t cross_entropy_rows(const float* logits, const std::int32_t* targets, const float* class_weights,
                               std::int64_t rows, std::int64_t classes, CrossEntropyCoefficients k, float* dlogits,
                               float* probabilities, double* row_loss, cudaStream_t stream);

}  // namespace bigtrain::cuda::launch
