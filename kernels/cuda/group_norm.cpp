#include "kernels/cuda/group_norm.hpp"

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/context.hpp"
#include "kernels/cuda/group_norm_kernels.hpp"

namespace bigtrain::kernels::cuda {
namespace {

using ::bigtrain::cuda::Context;

class CudaGroupNorm final : public GroupNorm {
 public:
  explicit CudaGroupNorm(const GroupNormSpec& spec) : spec_(spec), context_(Context::of_backend("group_norm")) {}

  void forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& save_mean,
               Tensor& save_invstd) override {
    context_.activate();
    BT_CUDA_CHECK(::bigtrain::cuda::launch::group_norm_forward(
        x.data<float>(), gamma.data<float>(), beta.data<float>(), spec_.epsilon, spec_.batch, spec_.channels,
        spec_.groups, spec_.height * spec_.width, y.data<float>(), save_mean.data<float>(),
        save_invstd.data<float>(), context_.compute_stream()));
  }

  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                const Tensor& save_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    context_.activate();
    BT_CUDA_CHECK(::bigtrain::cuda::launch::group_norm_backward(
        x.data<float>(), dy.data<float>(), gamma.data<float>(), save_mean.data<float>(), save_invstd.data<float>(),
        spec_.batch, spec_.channels, spec_.groups, spec_.height * spec_.width, dx.data<float>(), dgamma.data<float>(),
        dbeta.data<float>(), context_.compute_stream()));
  }

 private:
  GroupNormSpec spec_;
  Context& context_;
};

}  // namespace

std::unique_ptr<GroupNorm> make_group_norm(const GroupNormSpec& spec) { return std::make_unique<CudaGroupNorm>(spec); }

}  // namespace bigtrain::kernels::cuda
