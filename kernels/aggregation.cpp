#include "kernels/aggregation.hpp"

#include "kernels/backend_table.hpp"
#include "kernels/core/error.hpp"
#include "kernels/core/tensor_checks.hpp"

namespace bigtrain::kernels {
namespace {

void expect_f32(const Tensor& tensor, const Shape& shape, Backend backend, const char* op, const char* argument) {
  expect_tensor(tensor, shape, backend, op, argument);
  BT_CHECK(tensor.dtype() == DType::f32, "{}: argument `{}` is {}, expected float32", op, argument,
           dtype_name(tensor.dtype()));
}

// H must be a non-empty matrix: an image without tiles has nothing to aggregate,
// and the trainer reports that with the image's name before getting here.
void expect_features(const Tensor& h, Backend backend, const char* op) {
  BT_CHECK(h.defined() && h.rank() == 2, "{}: features must be a matrix [tiles, features], got {}", op,
           h.defined() ? shape_str(h.shape()) : std::string("undefined"));
  BT_CHECK(h.dim(0) > 0 && h.dim(1) > 0, "{}: features {} are empty", op, shape_str(h.shape()));
  expect_f32(h, h.shape(), backend, op, "h");
}

void expect_vector(const Tensor& v, Backend backend, const char* op, const char* argument) {
  BT_CHECK(v.defined() && v.rank() == 1 && v.dim(0) > 0, "{}: `{}` must be a non-empty vector, got {}", op, argument,
           v.defined() ? shape_str(v.shape()) : std::string("undefined"));
  expect_f32(v, v.shape(), backend, op, argument);
}

}  // namespace

void mean_rows_forward(Backend backend, const Tensor& h, Tensor& z) {
  const BackendTable& table = dispatch(Op::mean_rows, backend, h.dtype());
  expect_features(h, backend, "mean_rows_forward");
  expect_f32(z, {h.dim(1)}, backend, "mean_rows_forward", "z");
  table.mean_rows_forward(h, z);
}

void mean_rows_backward(Backend backend, const Tensor& dz, Tensor& dh) {
  const BackendTable& table = dispatch(Op::mean_rows, backend, dz.dtype());
  expect_features(dh, backend, "mean_rows_backward");
  expect_f32(dz, {dh.dim(1)}, backend, "mean_rows_backward", "dz");
  table.mean_rows_backward(dz, dh);
}

void max_rows_forward(Backend backend, const Tensor& h, Tensor& z, Tensor& argmax) {
  const BackendTable& table = dispatch(Op::max_rows, backend, h.dtype());
  expect_features(h, backend, "max_rows_forward");
  expect_f32(z, {h.dim(1)}, backend, "max_rows_forward", "z");
  expect_tensor(argmax, {h.dim(1)}, backend, "max_rows_forward", "argmax");
  BT_CHECK(argmax.dtype() == DType::i32, "max_rows_forward: `argmax` must be int32, got {}", dtype_name(argmax.dtype()));
  table.max_rows_forward(h, z, argmax);
}

void max_rows_backward(Backend backend, const Tensor& dz, const Tensor& argmax, Tensor& dh) {
  const BackendTable& table = dispatch(Op::max_rows, backend, dz.dtype());
  expect_features(dh, backend, "max_rows_backward");
  expect_f32(dz, {dh.dim(1)}, backend, "max_rows_backward", "dz");
  expect_tensor(argmax, {dh.dim(1)}, backend, "max_rows_backward", "argmax");
  BT_CHECK(argmax.dtype() == DType::i32, "max_rows_backward: `argmax` must be int32, got {}",
           dtype_name(argmax.dtype()));
  if (backend != Backend::cuda) {
    const std::int32_t* where = argmax.data<std::int32_t>();
    for (std::int64_t j = 0; j < argmax.numel(); ++j)
      BT_CHECK(where[j] >= 0 && where[j] < dh.dim(0), "max_rows_backward: argmax[{}] = {} is not a row of {} rows", j,
               where[j], dh.dim(0));
  }
  table.max_rows_backward(dz, argmax, dh);
}

void tanh_forward(Backend backend, const Tensor& x, Tensor& y) {
  const BackendTable& table = dispatch(Op::tanh, backend, x.dtype());
  expect_f32(x, x.shape(), backend, "tanh_forward", "x");
  expect_f32(y, x.shape(), backend, "tanh_forward", "y");
  table.tanh_forward(x, y);
}

void tanh_backward(Backend backend, const Tensor& y, const Tensor& dy, Tensor& dx) {
  const BackendTable& table = dispatch(Op::tanh, backend, y.dtype());
  expect_f32(y, y.shape(), backend, "tanh_backward", "y");
  expect_f32(dy, y.shape(), backend, "tanh_backward", "dy");
  expect_f32(dx, y.shape(), backend, "tanh_backward", "dx");
  table.tanh_backward(y, dy, dx);
}

void sigmoid_forward(Backend backend, const Tensor& x, Tensor& y) {
  const BackendTable& table = dispatch(Op::sigmoid, backend, x.dtype());
  expect_f32(x, x.shape(), backend, "sigmoid_forward", "x");
  expect_f32(y, x.shape(), backend, "sigmoid_forward", "y");
  table.sigmoid_forward(x, y);
}

void sigmoid_backward(Backend backend, const Tensor& y, const Tensor& dy, Tensor& dx) {
  const BackendTable& table = dispatch(Op::sigmoid, backend, y.dtype());
  expect_f32(y, y.shape(), backend, "sigmoid_backward", "y");
  expect_f32(dy, y.shape(), backend, "sigmoid_backward", "dy");
  expect_f32(dx, y.shape(), backend, "sigmoid_backward", "dx");
  table.sigmoid_backward(y, dy, dx);
}

void multiply(Backend backend, const Tensor& a, const Tensor& b, Tensor& out) {
  const BackendTable& table = dispatch(Op::multiply, backend, a.dtype());
  expect_f32(a, a.shape(), backend, "multiply", "a");
  expect_f32(b, a.shape(), backend, "multiply", "b");
  expect_f32(out, a.shape(), backend, "multiply", "out");
  table.multiply(a, b, out);
}

void softmax_forward(Backend backend, const Tensor& s, Tensor& a) {
  const BackendTable& table = dispatch(Op::softmax, backend, s.dtype());
  expect_vector(s, backend, "softmax_forward", "s");
  expect_f32(a, s.shape(), backend, "softmax_forward", "a");
  table.softmax_forward(s, a);
}

void softmax_backward(Backend backend, const Tensor& a, const Tensor& da, Tensor& ds) {
  const BackendTable& table = dispatch(Op::softmax, backend, a.dtype());
  expect_vector(a, backend, "softmax_backward", "a");
  expect_f32(da, a.shape(), backend, "softmax_backward", "da");
  expect_f32(ds, a.shape(), backend, "softmax_backward", "ds");
  table.softmax_backward(a, da, ds);
}

void weighted_sum_rows_forward(Backend backend, const Tensor& a, const Tensor& h, Tensor& z) {
  const BackendTable& table = dispatch(Op::weighted_sum_rows, backend, h.dtype());
  expect_features(h, backend, "weighted_sum_rows_forward");
  expect_f32(a, {h.dim(0)}, backend, "weighted_sum_rows_forward", "a");
  expect_f32(z, {h.dim(1)}, backend, "weighted_sum_rows_forward", "z");
  table.weighted_sum_rows_forward(a, h, z);
}

void weighted_sum_rows_backward(Backend backend, const Tensor& a, const Tensor& h, const Tensor& dz, Tensor& da,
                                Tensor& dh) {
  const BackendTable& table = dispatch(Op::weighted_sum_rows, backend, h.dtype());
  expect_features(h, backend, "weighted_sum_rows_backward");
  expect_f32(a, {h.dim(0)}, backend, "weighted_sum_rows_backward", "a");
  expect_f32(dz, {h.dim(1)}, backend, "weighted_sum_rows_backward", "dz");
  expect_f32(da, {h.dim(0)}, backend, "weighted_sum_rows_backward", "da");
  expect_f32(dh, h.shape(), backend, "weighted_sum_rows_backward", "dh");
  table.weighted_sum_rows_backward(a, h, dz, da, dh);
}

}  // namespace bigtrain::kernels
