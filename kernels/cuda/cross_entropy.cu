// Softmax cross-entropy rows: kernels/cpu/cross_entropy.cpp's per-row loop, one
// thread per row (rows are images or tiles, classes few: the op is tiny).
#include "kernels/cuda/cross_entropy_kernels.hpp"
#include "kernels/cuda/launch.cuh"

namespace bigtrain::cuda::launch {
namespace {

__global__ void cross_entropy_rows_kernel(const float* logits, const std::int32_t* targets, const float* weights,
                                          std::int64_t rows, std::int64_t classes, CrossEntropyCoefficients k,
                                          float* dlogits, float* probabilities, double* row_loss) {
  BT_GRID_STRIDE_LOOP(n, rows) {
    const float* z = logits + n * classes;
    float* grad = dlogits + n * classes;
    const std::int32_t target = targets[n];
    const float target_weight = weights ? weights[target] : 1.0f;
    float max_z = z[0];
    for (std::int64_t c = 1; c < classes; ++c) max_z = fmaxf(max_z, z[c]);
    float sum_exp = 0.0f;
    for (std::int64_t c = 0; c < classes; ++c) sum_exp += expf(z[c] - max_z);
    const float log_sum_exp = max_z + logf(sum_exp);
    float smooth = 0.0f;  // sum_c w[c] * -log p[n, c]
    for (std::int64_t c = 0; c < classes; ++c) smooth += (weights ? weights[c] : 1.0f) * (log_sum_exp - z[c]);
    row_loss[n] = static_cast<double>(k.nll) * target_weight * (log_sum_exp - z[target]) +
                  static_cast<double>(k.smooth) * smooth;
    for (std::int64_t c = 0; c < classes; ++c) {
      const float p = expf(z[c] - log_sum_exp);
      if (probabilities) probabilities[n * classes + c] = p;
      grad[c] = k.nll * target_weight * p + k.smooth * (p * k.total_weight - (weights ? weights[c] : 1.0f));
    }
    grad[target] -= k.nll * target_weight;
  }
}

}  // namespace

cudaError_t cross_entropy_rows(const float* logits, const std::int32_t* targets, const float* class_weights,
                               std::int64_t rows, std::int64_t classes, CrossEntropyCoefficients k, float* dlogits,
                               float* probabilities, double* row_loss, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  cross_entropy_rows_kernel<<<blocks_for(rows), kThreads, 0, stream>>>(logits, targets, class_weights, rows, classes,
                                                                        k, dlogits, probabilities, row_loss);
  return cudaGetLastError();
}

}  // namespace bigtrain::cuda::launch
