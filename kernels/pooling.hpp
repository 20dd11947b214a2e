#pragma once
// MaxPool2d and AvgPool2d over NCHW (PyTorch semantics: floor output size, padding
// ignored by max, counted by average when count_include_pad), and global average
// pooling [N,C,H,W] -> [N,C], the encoder's last layer.
#include <cstdint>
#include <memory>

#include "kernels/core/tensor.hpp"

namespace bigtrain::kernels {

enum class PoolKind : std::uint8_t { max, average };

struct Pool2dSpec {
  PoolKind kind = PoolKind::max;
  std::int64_t batch = 1, channels = 1, in_h = 1, in_w = 1;
  int kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  bool count_include_pad = true;  // average only; PyTorch's default

  std::int64_t out_h() const { return (in_h + 2 * pad_h - kernel_h) / stride_h + 1; }
  std::int64_t out_w() const { return (in_w + 2 * pad_w - kernel_w) / stride_w + 1; }
  Shape input_shape() const { return {batch, channels, in_h, in_w}; }
  Shape output_shape() const { return {batch, channels, out_h(), out_w()}; }
  friend bool operator==(const Pool2dSpec&, const Pool2dSpec&) = default;
};

class Pool2d {
 public:
  virtual ~Pool2d() = default;
  // Returns what backward needs (max pooling: where each maximum came from, in the
  // implementation's own format); undefined when nothing is needed.
  virtual Tensor forward(const Tensor& x, Tensor& y, bool training) = 0;
  virtual void backward(const Tensor& dy, const Tensor& workspace, Tensor& dx) = 0;
};

std::unique_ptr<Pool2d> make_pool2d(Backend backend, const Pool2dSpec& spec);

// [N,C,H,W] -> [N,C] mean over H and W, and its gradient (dx = dy / (H*W) broadcast).
void global_avg_pool_forward(Backend backend, const Tensor& x, Tensor& y);
void global_avg_pool_backward(Backend backend, const Tensor& dy, Tensor& dx);

}  // namespace bigtrain::kernels
