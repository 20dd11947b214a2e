#include "kernels/group_norm.hpp"

#include <cmath>

#include "kernels/backend_table.hpp"
#include "kernels/core/error.hpp"
#include "kernels/core/tensor_checks.hpp"

namespace bigtrain::kernels {

namespace {

void validate(const GroupNormSpec& s) {
  BT_CHECK(s.batch >= 1 && s.channels >= 1 && s.height >= 1 && s.width >= 1,
           "group_norm: batch {}, channels {} and size {}x{} must all be positive", s.batch, s.channels, s.height,
           s.width);
  BT_CHECK(s.groups >= 1 && s.channels % s.groups == 0, "group_norm: {} groups must divide the {} channels",
           s.groups, s.channels);
  BT_CHECK(std::isfinite(s.epsilon) && s.epsilon > 0.0f, "group_norm: epsilon {} must be positive", s.epsilon);
}

// Checks every call's arguments against the spec, then runs the backend.
class CheckedGroupNorm final : public GroupNorm {
 public:
  CheckedGroupNorm(Backend backend, const GroupNormSpec& spec, std::unique_ptr<GroupNorm> impl)
      : backend_(backend), spec_(spec), impl_(std::move(impl)) {}

  void forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& save_mean,
               Tensor& save_invstd) override {
    require_support(Op::group_norm, backend_, x.dtype());
    expect(x, spec_.input_shape(), "x");
    expect(gamma, spec_.channel_shape(), "gamma");
    expect(beta, spec_.channel_shape(), "beta");
    expect(y, spec_.input_shape(), "y");
    expect(save_mean, spec_.statistics_shape(), "save_mean");
    expect(save_invstd, spec_.statistics_shape(), "save_invstd");
    impl_->forward(x, gamma, beta, y, save_mean, save_invstd);
  }
  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                const Tensor& save_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    require_support(Op::group_norm, backend_, x.dtype());
    expect(x, spec_.input_shape(), "x");
    expect(dy, spec_.input_shape(), "dy");
    expect(gamma, spec_.channel_shape(), "gamma");
    expect(save_mean, spec_.statistics_shape(), "save_mean");
    expect(save_invstd, spec_.statistics_shape(), "save_invstd");
    expect(dx, spec_.input_shape(), "dx");
    expect(dgamma, spec_.channel_shape(), "dgamma");
    expect(dbeta, spec_.channel_shape(), "dbeta");
    impl_->backward(x, dy, gamma, save_mean, save_invstd, dx, dgamma, dbeta);
  }

 private:
  void expect(const Tensor& t, const Shape& shape, const char* name) const {
    expect_tensor(t, shape, backend_, "group_norm", name);
    BT_CHECK(t.dtype() == DType::f32, "group_norm: argument `{}` is {}, only float32 is implemented", name,
             dtype_name(t.dtype()));
  }

  Backend backend_;
  GroupNormSpec spec_;
  std::unique_ptr<GroupNorm> impl_;
};

}  // namespace

std::unique_ptr<GroupNorm> make_group_norm(Backend backend, const GroupNormSpec& spec) {
  const BackendTable& table = dispatch(Op::group_norm, backend, DType::f32);
  validate(spec);
  return std::make_unique<CheckedGroupNorm>(backend, spec, table.make_group_norm(spec));
}

}  // namespace bigtrain::kernels
