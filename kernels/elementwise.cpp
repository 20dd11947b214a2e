#include "kernels/elementwise.hpp"

#include "kernels/core/error.hpp"
#include "kernels/core/tensor_checks.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/reference/elementwise.hpp"

#ifdef BIGTRAIN_HAVE_CUDA
#include "kernels/cuda/elementwise.hpp"
// The CUDA backend runs the op; without it, asking for it is an error.
#define BT_ON_CUDA(op, call) return call
#else
#define BT_ON_CUDA(op, call) no_cuda_elementwise(op)
#endif

namespace bigtrain::kernels {
namespace {

void expect_operand(const Tensor& tensor, const Shape& shape, DType dtype, Backend backend, const char* op,
                    const char* argument) {
  expect_tensor(tensor, shape, backend, op, argument);
  BT_CHECK(tensor.dtype() == dtype, "{}: argument `{}` is {}, expected {}", op, argument, dtype_name(tensor.dtype()),
           dtype_name(dtype));
}

// The first operand sets the shape the others must share.
void expect_first(const Tensor& tensor, Backend backend, const char* op, const char* argument) {
  BT_CHECK(tensor.defined(), "{}: argument `{}` is undefined", op, argument);
  expect_operand(tensor, tensor.shape(), DType::f32, backend, op, argument);
}

#ifndef BIGTRAIN_HAVE_CUDA
[[noreturn]] void no_cuda_elementwise(const char* op) {
  throw Error(fmt::format("{}: this build has no CUDA backend", op));
}
#endif

void expect_probability(float p, const char* op) {
  BT_CHECK(p >= 0.0f && p <= 1.0f, "{}: drop probability {} must lie in [0, 1]", op, p);
}

}  // namespace

void relu_forward(Backend backend, const Tensor& x, Tensor& y) {
  expect_first(x, backend, "relu_forward", "x");
  expect_operand(y, x.shape(), DType::f32, backend, "relu_forward", "y");
  switch (backend) {
    case Backend::reference: return reference::relu_forward(x, y);
    case Backend::cpu: return cpu::relu_forward(x, y);
    case Backend::cuda: BT_ON_CUDA("relu_forward", cuda::relu_forward(x, y));
  }
}

void relu_backward(Backend backend, const Tensor& y, const Tensor& dy, Tensor& dx) {
  expect_first(y, backend, "relu_backward", "y");
  expect_operand(dy, y.shape(), DType::f32, backend, "relu_backward", "dy");
  expect_operand(dx, y.shape(), DType::f32, backend, "relu_backward", "dx");
  switch (backend) {
    case Backend::reference: return reference::relu_backward(y, dy, dx);
    case Backend::cpu: return cpu::relu_backward(y, dy, dx);
    case Backend::cuda: BT_ON_CUDA("relu_backward", cuda::relu_backward(y, dy, dx));
  }
}

void add(Backend backend, const Tensor& a, const Tensor& b, Tensor& out) {
  expect_first(a, backend, "add", "a");
  expect_operand(b, a.shape(), DType::f32, backend, "add", "b");
  expect_operand(out, a.shape(), DType::f32, backend, "add", "out");
  switch (backend) {
    case Backend::reference: return reference::add(a, b, out);
    case Backend::cpu: return cpu::add(a, b, out);
    case Backend::cuda: BT_ON_CUDA("add", cuda::add(a, b, out));
  }
}

void axpy(Backend backend, float alpha, const Tensor& x, Tensor& y) {
  expect_first(x, backend, "axpy", "x");
  expect_operand(y, x.shape(), DType::f32, backend, "axpy", "y");
  switch (backend) {
    case Backend::reference: return reference::axpy(alpha, x, y);
    case Backend::cpu: return cpu::axpy(alpha, x, y);
    case Backend::cuda: BT_ON_CUDA("axpy", cuda::axpy(alpha, x, y));
  }
}

void scale(Backend backend, float alpha, Tensor& x) {
  expect_first(x, backend, "scale", "x");
  switch (backend) {
    case Backend::reference: return reference::scale(alpha, x);
    case Backend::cpu: return cpu::scale(alpha, x);
    case Backend::cuda: BT_ON_CUDA("scale", cuda::scale(alpha, x));
  }
}

double sum_of_squares(Backend backend, const Tensor& x) {
  expect_first(x, backend, "sum_of_squares", "x");
  switch (backend) {
    case Backend::reference: return reference::sum_of_squares(x);
    case Backend::cpu: return cpu::sum_of_squares(x);
    case Backend::cuda: BT_ON_CUDA("sum_of_squares", cuda::sum_of_squares(x));
  }
  return 0.0;
}

bool all_finite(Backend backend, const Tensor& x) {
  expect_first(x, backend, "all_finite", "x");
  switch (backend) {
    case Backend::reference: return reference::all_finite(x);
    case Backend::cpu: return cpu::all_finite(x);
    case Backend::cuda: BT_ON_CUDA("all_finite", cuda::all_finite(x));
  }
  return false;
}

void dropout_forward(Backend backend, const Tensor& x, float p, std::uint64_t seed, std::uint64_t offset, Tensor& y,
                     Tensor& mask) {
  expect_first(x, backend, "dropout_forward", "x");
  expect_operand(y, x.shape(), DType::f32, backend, "dropout_forward", "y");
  expect_operand(mask, x.shape(), DType::u8, backend, "dropout_forward", "mask");
  expect_probability(p, "dropout_forward");
  switch (backend) {
    case Backend::reference: return reference::dropout_forward(x, p, seed, offset, y, mask);
    case Backend::cpu: return cpu::dropout_forward(x, p, seed, offset, y, mask);
    case Backend::cuda: BT_ON_CUDA("dropout_forward", cuda::dropout_forward(x, p, seed, offset, y, mask));
  }
}

void dropout_backward(Backend backend, const Tensor& dy, const Tensor& mask, float p, Tensor& dx) {
  expect_first(dy, backend, "dropout_backward", "dy");
  expect_operand(mask, dy.shape(), DType::u8, backend, "dropout_backward", "mask");
  expect_operand(dx, dy.shape(), DType::f32, backend, "dropout_backward", "dx");
  expect_probability(p, "dropout_backward");
  switch (backend) {
    case Backend::reference: return reference::dropout_backward(dy, mask, p, dx);
    case Backend::cpu: return cpu::dropout_backward(dy, mask, p, dx);
    case Backend::cuda: BT_ON_CUDA("dropout_backward", cuda::dropout_backward(dy, mask, p, dx));
  }
}

#undef BT_ON_CUDA

}  // namespace bigtrain::kernels
