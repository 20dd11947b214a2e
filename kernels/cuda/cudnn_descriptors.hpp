#pragma once
// Filling cuDNN descriptors from bigtrain shapes, with the int range checks the
// legacy cuDNN API needs (it takes int extents).
#include <climits>
#include <cstdint>

#include "kernels/core/error.hpp"
#include "kernels/cuda/handles.hpp"

namespace bigtrain::cuda {

inline int checked_int(std::int64_t value, const char* op, const char* what) {
  BT_CHECK(value >= 0 && value <= INT_MAX, "{}: {} = {} does not fit the int extents cuDNN takes", op, what, value);
  return static_cast<int>(value);
}

// A dense NCHW float32 tensor.
inline TensorDescriptor nchw_f32(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w, const char* op) {
  TensorDescriptor desc;
  BT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                            checked_int(n, op, "batch"), checked_int(c, op, "channels"),
                                            checked_int(h, op, "height"), checked_int(w, op, "width")));
  return desc;
}

}  // namespace bigtrain::cuda
