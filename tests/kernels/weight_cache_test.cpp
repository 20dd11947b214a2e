// The CPU backend keeps convolution weights reordered for oneDNN between calls
// (kernels/cpu/weight_cache.hpp): a declared write must reach the next call, an
// unchanged weight must not be reordered again, and a freed weight's copy must go.
#include <gtest/gtest.h>

#include <algorithm>

#include "kernels/conv2d.hpp"
#include "kernels/cpu/weight_cache.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using namespace bigtrain::testing;

// 16 to 32 channels: oneDNN takes the weights in a blocked layout, so they are
// reordered (a plain layout would be read in place and never cached).
Conv2dSpec blocked_spec() {
  Conv2dSpec s;
  s.batch = 2, s.in_channels = 16, s.out_channels = 32, s.in_h = 10, s.in_w = 10;
  s.kernel_h = s.kernel_w = 3, s.pad_h = s.pad_w = 1;
  return s;
}

constexpr Tolerance kFloat32{1e-4, 1e-5};

class CpuWeightCache : public ::testing::Test {
 protected:
  void SetUp() override { cpu::clear_weight_cache(); }

  // Forward and backward-data on the CPU against the reference backend with the same weight.
  void expect_current(const Tensor& weight, const std::string& what) {
    const Conv2dSpec spec = blocked_spec();
    Tensor y = Tensor::empty(spec.output_shape()), y_ref = Tensor::empty(spec.output_shape());
    cpu_->forward(x_, weight, nullptr, y);
    reference_->forward(x_, weight, nullptr, y_ref);
    expect_close(y.to_plain(), y_ref, kFloat32, what + ": forward");
    Tensor dx = Tensor::empty(spec.input_shape()), dx_ref = Tensor::empty(spec.input_shape());
    cpu_->backward_data(dy_, weight, dx);
    reference_->backward_data(dy_, weight, dx_ref);
    expect_close(dx.to_plain(), dx_ref, kFloat32, what + ": backward-data");
  }

  std::unique_ptr<Conv2d> cpu_ = make_conv2d(Backend::cpu, blocked_spec());
  std::unique_ptr<Conv2d> reference_ = make_conv2d(Backend::reference, blocked_spec());
  Tensor x_ = random_tensor(blocked_spec().input_shape(), 1);
  Tensor dy_ = random_tensor(blocked_spec().output_shape(), 2);
};

TEST_F(CpuWeightCache, EveryDeclaredWriteReachesTheNextCall) {
  Tensor weight = random_tensor(blocked_spec().weight_shape(), 3);
  expect_current(weight, "first call");
  weight.copy_from(random_tensor(blocked_spec().weight_shape(), 4));
  expect_current(weight, "after copy_from");
  weight.fill(0.25f);
  expect_current(weight, "after fill");
  weight.zero();
  expect_current(weight, "after zero");
  weight.data<float>()[7] = 3.0f;
  weight.mark_written();
  expect_current(weight, "after a write through data() and mark_written");
}

TEST_F(CpuWeightCache, UnchangedWeightsAreReorderedOnce) {
  Tensor weight = random_tensor(blocked_spec().weight_shape(), 3);
  expect_current(weight, "first call");
  const std::size_t after_first = cpu::cached_weight_bytes();
  // One copy for forward, one for backward-data, at least the weight's size each.
  EXPECT_GE(after_first, 2 * weight.nbytes());
  expect_current(weight, "second call");
  EXPECT_EQ(cpu::cached_weight_bytes(), after_first) << "an unchanged weight got a second copy";
  // The contract's other side, observed: an undeclared write is not seen, because
  // the kept copy is used without reading the tensor again.
  const Conv2dSpec spec = blocked_spec();
  Tensor before = Tensor::empty(spec.output_shape()), after = Tensor::empty(spec.output_shape());
  cpu_->forward(x_, weight, nullptr, before);
  weight.data<float>()[0] += 1.0f;
  cpu_->forward(x_, weight, nullptr, after);
  expect_close(after.to_plain(), before.to_plain(), {0.0, 0.0}, "undeclared write: the kept copy");
  weight.mark_written();
  cpu_->forward(x_, weight, nullptr, after);
  EXPECT_FALSE(std::ranges::equal(after.to_plain().to_vector(), before.to_plain().to_vector()))
      << "the declared write was not seen";
}

TEST_F(CpuWeightCache, AFreedWeightsCopiesAreFreedByTheNextNewWeight) {
  std::size_t one_weight = 0;
  {
    Tensor first = random_tensor(blocked_spec().weight_shape(), 3);
    expect_current(first, "first weight");
    one_weight = cpu::cached_weight_bytes();
  }
  Tensor second = random_tensor(blocked_spec().weight_shape(), 5);
  expect_current(second, "second weight");
  EXPECT_EQ(cpu::cached_weight_bytes(), one_weight) << "the freed weight's copies are still held";
}

}  // namespace
}  // namespace bigtrain::kernels
