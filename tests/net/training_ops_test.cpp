// The ops a training run calls, from its specs: what the trainer and `bigtrain plan`
// ask the backend table about before building anything.
#include "net/training_ops.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace bigtrain::net {
namespace {

using kernels::Op;

bool uses(const std::vector<OpUse>& ops, Op op) {
  return std::any_of(ops.begin(), ops.end(), [&](const OpUse& use) { return use.op == op; });
}

DType dtype_of(const std::vector<OpUse>& ops, Op op) {
  return std::find_if(ops.begin(), ops.end(), [&](const OpUse& use) { return use.op == op; })->dtype;
}

ModelSpec small_model(bool maxpool) {
  ModelSpec spec;
  spec.encoder = EncoderSpec::preset_spec("small");
  spec.encoder.stem.maxpool = maxpool;
  return spec;
}

// A plain encoder (no residual sum, no max-pool), the mean, SGD: nothing more.
TEST(TrainingOps, SmallEncoderMeanAggregatorSgd) {
  const auto ops = training_ops(small_model(false), {.kind = AggregatorKind::mean}, OptimizerKind::sgd, DType::f32);
  const std::vector<Op> expected{Op::conv2d,      Op::batch_norm, Op::relu,           Op::frozen_norm_conv,
                                 Op::global_avg_pool, Op::mean_rows, Op::linear,      Op::cross_entropy,
                                 Op::sgd_update,  Op::axpy,      Op::scale,          Op::sum_of_squares,
                                 Op::all_finite};
  ASSERT_EQ(ops.size(), expected.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(ops[i].op, expected[i]) << i << ": " << kernels::op_name(ops[i].op);
    EXPECT_EQ(ops[i].dtype, DType::f32) << kernels::op_name(ops[i].op);
  }
}

// A ResNet with gated attention and dropout, AdamW, bf16: the residual sum, the
// stem's max-pool and attention's ops join; conv2d and linear compute in bf16, every
// other op in float32; each op is listed once.
TEST(TrainingOps, ResnetGatedAttentionAdamWBf16) {
  ModelSpec resnet;
  resnet.encoder = EncoderSpec::preset_spec("resnet18");
  const AggregatorSpec attention{.kind = AggregatorKind::attention, .gated = true, .dropout = 0.25f};
  const auto ops = training_ops(resnet, attention, OptimizerKind::adamw, DType::bf16);
  for (Op op : {Op::pool2d, Op::add, Op::linear, Op::tanh, Op::sigmoid, Op::multiply, Op::softmax,
                Op::weighted_sum_rows, Op::dropout, Op::adamw_update})
    EXPECT_TRUE(uses(ops, op)) << kernels::op_name(op);
  EXPECT_FALSE(uses(ops, Op::sgd_update));
  EXPECT_FALSE(uses(ops, Op::mean_rows));
  EXPECT_FALSE(uses(ops, Op::max_rows));
  EXPECT_EQ(dtype_of(ops, Op::conv2d), DType::bf16);
  EXPECT_EQ(dtype_of(ops, Op::linear), DType::bf16);
  EXPECT_EQ(dtype_of(ops, Op::softmax), DType::f32);
  for (const OpUse& use : ops)
    EXPECT_EQ(std::count(ops.begin(), ops.end(), use), 1) << kernels::op_name(use.op);

  const auto ungated = training_ops(small_model(true), {.kind = AggregatorKind::attention, .gated = false},
                                    OptimizerKind::sgd, DType::f32);
  EXPECT_FALSE(uses(ungated, Op::sigmoid));
  EXPECT_FALSE(uses(ungated, Op::dropout));
  EXPECT_TRUE(uses(ungated, Op::pool2d));
  EXPECT_TRUE(uses(ungated, Op::add));  // attention's gradient sums its two branches
  EXPECT_TRUE(uses(training_ops(small_model(false), {.kind = AggregatorKind::max}, OptimizerKind::sgd, DType::f32),
                   Op::max_rows));
}

// The refusal names op, dtype and backend, from the backend's own table: the CPU
// backend has no float16 convolution; the reference computes every dtype.
TEST(TrainingOps, TheFirstOpABackendRefusesIsNamed) {
  const auto fp16 = training_ops(small_model(false), {.kind = AggregatorKind::mean}, OptimizerKind::adamw, DType::f16);
  const std::string why = why_backend_refuses(fp16, Backend::cpu);
  EXPECT_EQ(why, kernels::why_unsupported(Op::conv2d, Backend::cpu, DType::f16));
  EXPECT_NE(why.find("conv2d in float16 is not supported by the cpu backend"), std::string::npos) << why;
  EXPECT_EQ(why_backend_refuses(fp16, Backend::reference), "");
  EXPECT_EQ(why_backend_refuses(training_ops(small_model(false), {.kind = AggregatorKind::mean}, OptimizerKind::adamw,
                                             DType::f32),
                                Backend::cpu),
            "");
}

}  // namespace
}  // namespace bigtrain::net
