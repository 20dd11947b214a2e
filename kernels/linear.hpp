#pragma once
// Fully connected layer y = x W^T + b with W of shape [out, in], as PyTorch's Linear.
#include <cstdint>
#include <memory>

#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels {

struct LinearSpec {
  std::int64_t batch = 1, in_features = 1, out_features = 1;
  bool bias = true;
  // As Conv2dSpec::compute_dtype: operands rounded to f32, bf16 or f16, float32 accumulation.
  DType compute_dtype = DType::f32;
  Shape input_shape() const { return {batch, in_features}; }
  Shape weight_shape() const { return {out_features, in_features}; }
  Shape output_shape() const { return {batch, out_features}; }
  friend bool operator==(const LinearSpec&, const LinearSpec&) = default;
};

class Linear {
 public:
  virtual ~Linear() = default;
  virtual void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) = 0;
  virtual void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) = 0;
  // Overwrites dweight (and dbias when given).
  virtual void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) = 0;
};

std::unique_ptr<Linear> make_linear(Backend backend, const LinearSpec& spec);

}  // namespace bigtrain::kernels
