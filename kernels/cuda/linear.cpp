#include "kernels/cuda/linear.hpp"

#include "kernels/cuda/cast.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/cudnn_descriptors.hpp"
#include "kernels/cuda/linear_kernels.hpp"

namespace bigtrain::kernels::cuda {
namespace {

using ::bigtrain::cuda::checked_int;
using ::bigtrain::cuda::Context;

const float kOne = 1.0f, kZero = 0.0f;

cudaDataType_t operand_type(DType dtype) { return dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F; }

// cuBLAS is column-major. A row-major [r, c] buffer read column-major is its
// transpose [c, r] with leading dimension c, so cuBLAS sees X^T [in x B],
// W^T [in x out] and dY^T [out x B], and each product is computed transposed:
//   forward:  Y^T  [out x B]  = (W^T)^T * X^T      gemm(T, N)
//   data:     dX^T [in x B]   = W^T * dY^T         gemm(N, N)
//   weights:  dW^T [in x out] = X^T * (dY^T)^T     gemm(N, T)
// Mixed precision: the operands are rounded into 16-bit copies and multiplied by
// cublasGemmEx with float32 accumulation (CUBLAS_COMPUTE_32F) into the float32
// output directly, so unlike the convolution no result is rounded to 16 bits.
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
    gemm(CUBLAS_OP_T, CUBLAS_OP_N, out_, batch_, in_, weight, in_, x, in_, y, out_);
    if (bias != nullptr) {
      BT_CUDA_CHECK(::bigtrain::cuda::launch::add_row_bias(y.data<float>(), bias->data<float>(), spec_.batch,
                                                            spec_.out_features, context_.compute_stream()));
    }
  }

  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    context_.activate();
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, in_, batch_, out_, weight, in_, dy, out_, dx, in_);
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    context_.activate();
    gemm(CUBLAS_OP_N, CUBLAS_OP_T, in_, out_, batch_, x, in_, dy, out_, dweight, in_);
    if (dbias != nullptr) {
      BT_CUDA_CHECK(::bigtrain::cuda::launch::sum_rows(dy.data<float>(), spec_.batch, spec_.out_features,
                                                        dbias->data<float>(), context_.compute_stream()));
    }
  }

 private:
  // C = op(A) * op(B) (column-major, cuBLAS's m, n, k and leading dimensions).
  void gemm(cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, const Tensor& a, int lda,
            const Tensor& b, int ldb, Tensor& c, int ldc) {
    if (spec_.compute_dtype == DType::f32) {
      BT_CUBLAS_CHECK(cublasSgemm(context_.cublas(), op_a, op_b, m, n, k, &kOne, a.data<float>(), lda,
                                  b.data<float>(), ldb, &kZero, c.data<float>(), ldc));
      return;
    }
    const Tensor a16 = to_16bit(a, spec_.compute_dtype, context_), b16 = to_16bit(b, spec_.compute_dtype, context_);
    const cudaDataType_t type = operand_type(spec_.compute_dtype);
    BT_CUBLAS_CHECK(cublasGemmEx(context_.cublas(), op_a, op_b, m, n, k, &kOne, a16.raw_data(), type, lda,
                                 b16.raw_data(), type, ldb, &kZero, c.raw_data(), CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
  }

  LinearSpec spec_;
  Context& context_;
  int batch_, in_, out_;
};

}  // namespace

std::unique_ptr<Linear> make_linear(const LinearSpec& spec) { return std::make_unique<CublasLinear>(spec); }

}  // namespace bigtrain::kernels::cuda
