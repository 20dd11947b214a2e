#pragma once
// The bias gradient of a mixed-precision layer: the float32 sum of the unrounded
// output gradient over every dimension but the channel (dims[1]). oneDNN's bf16
// backward-weights would sum the bf16-rounded gradient instead; the reference
// oracle and cuDNN's backward-bias sum float32, so this does too.
#include <dnnl.hpp>

#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels::cpu {

class BiasGradient {
 public:
  BiasGradient() = default;
  // `gradient_dims`: the output gradient's shape, channels second ({N, C} or {N, C, H, W}).
  explicit BiasGradient(const dnnl::memory::dims& gradient_dims);
  // Overwrites dbias (C floats) with the sums of dy (plain row-major float32).
  void compute(const Tensor& dy, Tensor& dbias);

 private:
  dnnl::reduction::primitive_desc pd_;
  dnnl::reduction reduction_;
  dnnl::memory src_, dst_, scratch_;
};

}  // namespace bigtrain::kernels::cpu
