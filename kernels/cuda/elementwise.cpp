#include "kernels/cuda/elementwise.hpp"

#include "kernels/cuda/context.hpp"
#include "kernels/cuda/elementwise_kernels.hpp"

namespace bigtrain::kernels::cuda {
namespace {

using ::bigtrain::cuda::Context;

cudaStream_t stream_of(const Tensor& t, const char* op) { return Context::of(t.device(), op).compute_stream(); }

// Copies one device value to the host once the compute stream has produced it.
template <typename T>
T read_back(const T* device_value, cudaStream_t stream) {
  T host{};
  BT_CUDA_CHECK(cudaMemcpyAsync(&host, device_value, sizeof(T), cudaMemcpyDeviceToHost, stream));
  BT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

}  // namespace

void relu_forward(const Tensor& x, Tensor& y) {
  BT_CUDA_CHECK(::bigtrain::cuda::launch::relu_forward(x.data<float>(), y.data<float>(), x.numel(),
                                                        stream_of(x, "relu_forward")));
}

void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  BT_CUDA_CHECK(::bigtrain::cuda::launch::relu_backward(y.data<float>(), dy.data<float>(), dx.data<float>(),
                                                         y.numel(), stream_of(y, "relu_backward")));
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  BT_CUDA_CHECK(::bigtrain::cuda::launch::add(a.data<float>(), b.data<float>(), out.data<float>(), a.numel(),
                                               stream_of(a, "add")));
}

void axpy(float alpha, const Tensor& x, Tensor& y) {
  BT_CUDA_CHECK(
      ::bigtrain::cuda::launch::axpy(alpha, x.data<float>(), y.data<float>(), x.numel(), stream_of(x, "axpy")));
}

void scale(float alpha, Tensor& x) {
  BT_CUDA_CHECK(::bigtrain::cuda::launch::scale(alpha, x.data<float>(), x.numel(), stream_of(x, "scale")));
}

double sum_of_squares(const Tensor& x) {
  const cudaStream_t stream = stream_of(x, "sum_of_squares");
  // Partial sums and the result in one scratch tensor from the caching allocator.
  constexpr int kPartials = ::bigtrain::cuda::launch::kReductionBlocks;
  Tensor scratch = Tensor::empty({(kPartials + 1) * static_cast<std::int64_t>(sizeof(double))}, DType::u8, x.device());
  double* partials = scratch.data<double>();
  BT_CUDA_CHECK(
      ::bigtrain::cuda::launch::sum_of_squares(x.data<float>(), x.numel(), partials, partials + kPartials, stream));
  return read_back(partials + kPartials, stream);
}

bool all_finite(const Tensor& x) {
  const cudaStream_t stream = stream_of(x, "all_finite");
  Tensor flag = Tensor::empty({1}, DType::i32, x.device());
  BT_CUDA_CHECK(cudaMemsetAsync(flag.raw_data(), 0, sizeof(int), stream));
  BT_CUDA_CHECK(::bigtrain::cuda::launch::flag_non_finite(x.data<float>(), x.numel(), flag.data<int>(), stream));
  return read_back(flag.data<int>(), stream) == 0;
}

void dropout_forward(const Tensor& x, float p, std::uint64_t seed, std::uint64_t offset, Tensor& y, Tensor& mask) {
  const float keep_scale = 1.0f / (1.0f - p);  // unused (infinite) when p == 1: nothing is kept, as on the CPU
  BT_CUDA_CHECK(::bigtrain::cuda::launch::dropout_forward(x.data<float>(), p, keep_scale, seed, offset,
                                                           y.data<float>(), mask.data<std::uint8_t>(), x.numel(),
                                                           stream_of(x, "dropout_forward")));
}

void dropout_backward(const Tensor& dy, const Tensor& mask, float p, Tensor& dx) {
  const float keep_scale = 1.0f / (1.0f - p);
  BT_CUDA_CHECK(::bigtrain::cuda::launch::dropout_backward(dy.data<float>(), mask.data<std::uint8_t>(), keep_scale,
                                                            dx.data<float>(), dy.numel(),
                                                            stream_of(dy, "dropout_backward")));
}

}  // namespace bigtrain::kernels::cuda
