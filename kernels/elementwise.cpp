#include "kernels/elementwise.hpp"

#include "kernels/backend_table.hpp"
#include "kernels/core/error.hpp"
#include "kernels/core/tensor_checks.hpp"

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

// Element-wise ops see flat arrays: any layout works as long as every operand and
// the output share it. The output takes the first operand's layout when it can;
// operands in another layout are converted (at a network's edges only, e.g. a
// plain gradient from global pooling meeting a blocked activation).
Layout align_layouts(Tensor& out, std::initializer_list<Tensor*> operands, Layout wanted) {
  const Layout layout = writable_layout(out, wanted);
  for (Tensor* operand : operands)
    if (operand->layout() != layout) *operand = operand->to_layout(layout);
  out.set_layout(layout);
  return layout;
}

void expect_probability(float p, const char* op) {
  BT_CHECK(p >= 0.0f && p <= 1.0f, "{}: drop probability {} must lie in [0, 1]", op, p);
}

}  // namespace

void relu_forward(Backend backend, const Tensor& x, Tensor& y) {
  const BackendTable& table = dispatch(Op::relu, backend, x.dtype());
  expect_first(x, backend, "relu_forward", "x");
  expect_operand(y, x.shape(), DType::f32, backend, "relu_forward", "y");
  Tensor input = x;
  align_layouts(y, {&input}, x.layout());
  table.relu_forward(input, y);
}

void relu_backward(Backend backend, const Tensor& y, const Tensor& dy, Tensor& dx) {
  const BackendTable& table = dispatch(Op::relu, backend, y.dtype());
  expect_first(y, backend, "relu_backward", "y");
  expect_operand(dy, y.shape(), DType::f32, backend, "relu_backward", "dy");
  expect_operand(dx, y.shape(), DType::f32, backend, "relu_backward", "dx");
  Tensor output = y, gradient = dy;
  align_layouts(dx, {&output, &gradient}, y.layout());
  table.relu_backward(output, gradient, dx);
}

void add(Backend backend, const Tensor& a, const Tensor& b, Tensor& out) {
  const BackendTable& table = dispatch(Op::add, backend, a.dtype());
  expect_first(a, backend, "add", "a");
  expect_operand(b, a.shape(), DType::f32, backend, "add", "b");
  expect_operand(out, a.shape(), DType::f32, backend, "add", "out");
  Tensor lhs = a, rhs = b;
  align_layouts(out, {&lhs, &rhs}, a.layout());
  table.add(lhs, rhs, out);
}

void axpy(Backend backend, float alpha, const Tensor& x, Tensor& y) {
  const BackendTable& table = dispatch(Op::axpy, backend, x.dtype());
  expect_first(x, backend, "axpy", "x");
  expect_operand(y, x.shape(), DType::f32, backend, "axpy", "y");
  // y holds values already: x comes to y's layout.
  const Tensor input = x.to_layout(y.layout());
  table.axpy(alpha, input, y);
}

void scale(Backend backend, float alpha, Tensor& x) {
  const BackendTable& table = dispatch(Op::scale, backend, x.dtype());
  expect_first(x, backend, "scale", "x");
  table.scale(alpha, x);
}

double sum_of_squares(Backend backend, const Tensor& x) {
  const BackendTable& table = dispatch(Op::sum_of_squares, backend, x.dtype());
  expect_first(x, backend, "sum_of_squares", "x");
  return table.sum_of_squares(x);
}

bool all_finite(Backend backend, const Tensor& x) {
  const BackendTable& table = dispatch(Op::all_finite, backend, x.dtype());
  expect_first(x, backend, "all_finite", "x");
  return table.all_finite(x);
}

void dropout_forward(Backend backend, const Tensor& x, float p, std::uint64_t seed, std::uint64_t offset, Tensor& y,
                     Tensor& mask) {
  const BackendTable& table = dispatch(Op::dropout, backend, x.dtype());
  expect_first(x, backend, "dropout_forward", "x");
  expect_operand(y, x.shape(), DType::f32, backend, "dropout_forward", "y");
  expect_operand(mask, x.shape(), DType::u8, backend, "dropout_forward", "mask");
  expect_probability(p, "dropout_forward");
  // The mask is drawn per NCHW position, so a blocked input would change it.
  y.set_layout(Layout::plain);
  table.dropout_forward(x.to_plain(), p, seed, offset, y, mask);
}

void dropout_backward(Backend backend, const Tensor& dy, const Tensor& mask, float p, Tensor& dx) {
  const BackendTable& table = dispatch(Op::dropout, backend, dy.dtype());
  expect_first(dy, backend, "dropout_backward", "dy");
  expect_operand(mask, dy.shape(), DType::u8, backend, "dropout_backward", "mask");
  expect_operand(dx, dy.shape(), DType::f32, backend, "dropout_backward", "dx");
  expect_probability(p, "dropout_backward");
  dx.set_layout(Layout::plain);
  table.dropout_backward(dy.to_plain(), mask, p, dx);
}

}  // namespace bigtrain::kernels
