#include "kernels/cuda/aggregation.hpp"

#include "kernels/core/error.hpp"
#include "kernels/cuda/aggregation_kernels.hpp"
#include "kernels/cuda/context.hpp"

namespace bigtrain::kernels::cuda {
namespace {

namespace launch = ::bigtrain::cuda::launch;

cudaStream_t stream_of(const Tensor& t, const char* op) {
  return ::bigtrain::cuda::Context::of(t.device(), op).compute_stream();
}

const float* in(const Tensor& t) { return t.data<float>(); }
float* out(Tensor& t) { return t.data<float>(); }

}  // namespace

void mean_rows_forward(const Tensor& h, Tensor& z) {
  BT_CUDA_CHECK(launch::mean_rows_forward(in(h), h.dim(0), h.dim(1), out(z), stream_of(h, "mean_rows_forward")));
}

void mean_rows_backward(const Tensor& dz, Tensor& dh) {
  BT_CUDA_CHECK(
      launch::mean_rows_backward(in(dz), dh.dim(0), dh.dim(1), out(dh), stream_of(dz, "mean_rows_backward")));
}

void max_rows_forward(const Tensor& h, Tensor& z, Tensor& argmax) {
  BT_CUDA_CHECK(launch::max_rows_forward(in(h), h.dim(0), h.dim(1), out(z), argmax.data<std::int32_t>(),
                                         stream_of(h, "max_rows_forward")));
}

void max_rows_backward(const Tensor& dz, const Tensor& argmax, Tensor& dh) {
  // The same check the host backends make (a row index outside H is an error, not
  // a silently dropped gradient): argmax is one int per feature, a small copy.
  const Tensor where = argmax.to(Device::cpu());
  for (std::int64_t j = 0; j < where.numel(); ++j) {
    const std::int32_t row = where.data<std::int32_t>()[j];
    BT_CHECK(row >= 0 && row < dh.dim(0), "max_rows_backward: argmax[{}] = {} is not a row of {} rows", j, row,
             dh.dim(0));
  }
  BT_CUDA_CHECK(launch::max_rows_backward(in(dz), argmax.data<std::int32_t>(), dh.dim(0), dh.dim(1), out(dh),
                                          stream_of(dz, "max_rows_backward")));
}

void tanh_forward(const Tensor& x, Tensor& y) {
  BT_CUDA_CHECK(launch::tanh_forward(in(x), out(y), x.numel(), stream_of(x, "tanh_forward")));
}

void tanh_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  BT_CUDA_CHECK(launch::tanh_backward(in(y), in(dy), out(dx), y.numel(), stream_of(y, "tanh_backward")));
}

void sigmoid_forward(const Tensor& x, Tensor& y) {
  BT_CUDA_CHECK(launch::sigmoid_forward(in(x), out(y), x.numel(), stream_of(x, "sigmoid_forward")));
}

void sigmoid_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  BT_CUDA_CHECK(launch::sigmoid_backward(in(y), in(dy), out(dx), y.numel(), stream_of(y, "sigmoid_backward")));
}

void multiply(const Tensor& a, const Tensor& b, Tensor& out_tensor) {
  BT_CUDA_CHECK(launch::multiply(in(a), in(b), out(out_tensor), a.numel(), stream_of(a, "multiply")));
}

void softmax_forward(const Tensor& s, Tensor& a) {
  BT_CUDA_CHECK(launch::softmax_forward(in(s), s.numel(), out(a), stream_of(s, "softmax_forward")));
}

void softmax_backward(const Tensor& a, const Tensor& da, Tensor& ds) {
  BT_CUDA_CHECK(launch::softmax_backward(in(a), in(da), a.numel(), out(ds), stream_of(a, "softmax_backward")));
}

void weighted_sum_rows_forward(const Tensor& a, const Tensor& h, Tensor& z) {
  BT_CUDA_CHECK(launch::weighted_sum_rows_forward(in(a), in(h), h.dim(0), h.dim(1), out(z),
                                                  stream_of(h, "weighted_sum_rows_forward")));
}

void weighted_sum_rows_backward(const Tensor& a, const Tensor& h, const Tensor& dz, Tensor& da, Tensor& dh) {
  BT_CUDA_CHECK(launch::weighted_sum_rows_backward(in(a), in(h), in(dz), h.dim(0), h.dim(1), out(da), out(dh),
                                                   stream_of(h, "weighted_sum_rows_backward")));
}

}  // namespace bigtrain::kernels::cuda
