#include "kernels/cuda/linear.hpp"

#include "kernels/cuda/context.hpp"
#include "kernels/cuda/cudnn_descriptors.hpp"
#include "kernels/cuda/linear_kernels.hpp"

namespace bigtrain::kernels::cuda {
namespace {

using ::bigtrain::cuda::checked_int;
using ::bigtrain::cuda::Context;

const float kOne = 1.0f, kZero = 0.0f;

// cuBLAS is column-major. A row-major [r, c] buffer read column-major is its
// transpose [c, r] with leading dimension c, so cuBLAS sees X^T [in x B],
// W^T [in x out] and dY^T [out x B], and each product is computed transposed:
//   forward:  Y^T  [out x B]  = (W^T)^T * X^T      gemm(T, N)
//   data:     dX^T [in x B]   = W^T * dY^T         gemm(N, N)
//   weights:  dW^T [in x out] = X^T * (dY^T)^T     gemm(N, T)
class CublasLinear final : public Linear {
 public:
  explicit CublasLinear(const LinearSpec& spec)
      : spec_(spec),
        context_(Context::of_backend("linear")),
        batch_(checked_int(spec.batch, "linear", "batch")),
        in_(checked_int(spec.in_features, "linear", "in_features")),
        out_(checked_int(spec.out_features, "linear", "out_features")) {}

  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    context_.activate();
    BT_CUBLAS_CHECK(cublasSgemm(context_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, out_, batch_, in_, &kOne,
                                weight.data<float>(), in_, x.data<float>(), in_, &kZero, y.data<float>(), out_));
    if (bias != nullptr) {
      BT_CUDA_CHECK(::bigtrain::cuda::launch::add_row_bias(y.data<float>(), bias->data<float>(), spec_.batch,
                                                            spec_.out_features, context_.compute_stream()));
    }
  }

  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    context_.activate();
    BT_CUBLAS_CHECK(cublasSgemm(context_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, in_, batch_, out_, &kOne,
                                weight.data<float>(), in_, dy.data<float>(), out_, &kZero, dx.data<float>(), in_));
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    context_.activate();
    BT_CUBLAS_CHECK(cublasSgemm(context_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, in_, out_, batch_, &kOne,
                                x.data<float>(), in_, dy.data<float>(), out_, &kZero, dweight.data<float>(), in_));
    if (dbias != nullptr) {
      BT_CUDA_CHECK(::bigtrain::cuda::launch::sum_rows(dy.data<float>(), spec_.batch, spec_.out_features,
                                                        dbias->data<float>(), context_.compute_stream()));
    }
  }

 private:
  LinearSpec spec_;
  Context& context_;
  int batch_, in_, out_;
};

}  // namespace

std::unique_ptr<Linear> make_linear(const LinearSpec& spec) { return std::make_unique<CublasLinear>(spec); }

}  // namespace bigtrain::kernels::cuda
