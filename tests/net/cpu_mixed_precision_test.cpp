// A ResNet-18 training step in bfloat16 mixed precision on the CPU (oneDNN's
// avx512_core_bf16 kernels) against the same step on the reference backend, which
// defines mixed precision (operands rounded to bf16, float32 results;
// kernels/reference/round_to_dtype.hpp). Skips, saying why, on a CPU without
// AVX512_BF16.
// Why no elementwise tolerance: tests/net/mixed_step.hpp.
#include <gtest/gtest.h>

#include "net/model.hpp"
#include "tests/net/mixed_step.hpp"
#include "tests/support/compute_type.hpp"

namespace bigtrain::net {
namespace {

using namespace bigtrain::net::testing;

TEST(CpuMixedPrecision, ResNet18Bf16TrainingStepFollowsTheReference) {
  BT_SKIP_UNLESS_COMPUTES(Backend::cpu, DType::bf16);
  const ModelSpec spec = grey_preset("resnet18", 10);
  Model reference_model(spec, 41), bf16_model(spec, 41), fp32_model(spec, 41);
  const Tensor x = random_tensor({4, 1, 64, 64}, 42);
  Tensor targets = Tensor::empty({4}, DType::i32);
  for (int i = 0; i < 4; ++i) targets.data<std::int32_t>()[i] = (3 * i) % 10;

  const auto expected = mixed_training_step(reference_model, Backend::reference, DType::bf16, x, targets);
  const auto bf16 = mixed_training_step(bf16_model, Backend::cpu, DType::bf16, x, targets);
  const auto fp32 = mixed_training_step(fp32_model, Backend::cpu, DType::f32, x, targets);
  // Measured worst 0.25 (a layer-1 BatchNorm bias gradient); a wrong layout, type or
  // missing operand is O(1).
  const MixedStepDistances distances = compare_mixed_steps(expected, bf16, fp32, reference_model, 0.5);
  // Over all tensors the CPU's bf16 step is nearer the reference's bf16 step than
  // its float32 step is: the operands were rounded as the reference rounds them.
  // Measured 0.645 (per tensor at most 0.89).
  EXPECT_LT(distances.ratio, 0.85);
}

}  // namespace
}  // namespace bigtrain::net
