// Whole networks on the CPU backend with activations kept in oneDNN's blocked
// layout between layers (ForwardContext::blocked_activations) against the same
// networks reordering into NCHW around every op: the layouts really are blocked
// inside, and outputs and gradients agree (bit for bit where both run the same
// arithmetic: convolutions and frozen BatchNorm; within float rounding where
// BatchNorm sums batch statistics in another order).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cpu/isa.hpp"
#include "net/encoder.hpp"
#include "net/model.hpp"
#include "tests/net/net_testing.hpp"
#include "tests/support/compute_type.hpp"

namespace bigtrain::net {
namespace {

using namespace bigtrain::testing;
using namespace bigtrain::net::testing;

// Counts the ReLU inputs a pass sees in a blocked layout (a hook turns fusion off,
// so every ReLU is its own op here).
class LayoutCounter final : public ReluInputHook {
 public:
  void before_relu(const std::string&, Tensor& input) override {
    ++total;
    if (input.layout() != Layout::plain) ++blocked;
  }
  int total = 0, blocked = 0;
};

class BlockedActivations : public ::testing::TestWithParam<std::string> {};

TEST_P(BlockedActivations, TrainingStepEqualsThePlainLayoutOne) {
  EncoderSpec spec = EncoderSpec::preset_spec(GetParam());
  spec.in_channels = 1;
  Encoder encoder(spec, 5);
  const Tensor x = random_tensor({2, 1, 64, 64}, 3);
  ForwardContext frozen = ForwardContext::train(Backend::cpu);
  frozen.freeze_bn = true;
  const Shape features = encoder.forward(x, ForwardContext::inference(Backend::cpu)).shape();
  const std::vector<double> r = random_doubles(static_cast<std::size_t>(shape_numel(features)), 9);

  // The counting hook must see every ReLU input, so that pass runs the layers one by
  // one (no convolution + BatchNorm fusion), and so does the plain one it is held to.
  ForwardContext plain_ctx = frozen;
  plain_ctx.blocked_activations = false;
  plain_ctx.fuse_conv_bn = false;
  LayoutCounter counter;
  ForwardContext counted = frozen;
  counted.relu_input_hook = &counter;
  const LayerGradients blocked = run_forward_backward(encoder, x, counted, r);
  const LayerGradients plain = run_forward_backward(encoder, x, plain_ctx, r);
  std::printf("[blocked] %s: %d of %d ReLU inputs blocked\n", GetParam().c_str(), counter.blocked, counter.total);
  EXPECT_GT(counter.blocked, counter.total / 2) << "the CPU backend should keep most activations blocked";
  EXPECT_EQ(blocked.y.layout(), Layout::plain);  // pooled features leave the encoder plain
  // Global average pooling sums the blocked channels in another order.
  expect_close(blocked.y, plain.y, {1e-5, 1e-7}, "features");
  ASSERT_EQ(blocked.params.size(), plain.params.size());
  for (std::size_t i = 0; i < plain.params.size(); ++i)
    expect_close(blocked.params[i], plain.params[i], {static_cast<std::int64_t>(plain.params[i].size())},
                 {1e-5, 1e-7}, "parameter gradient " + std::to_string(i));
  // Frozen BatchNorm trained inside the convolutions (net/conv_bn_fusion.hpp): the
  // same in either layout.
  ForwardContext fused_plain = frozen;
  fused_plain.blocked_activations = false;
  const LayerGradients fused_blocked_step = run_forward_backward(encoder, x, frozen, r);
  const LayerGradients fused_plain_step = run_forward_backward(encoder, x, fused_plain, r);
  expect_close(fused_blocked_step.y, fused_plain_step.y, {1e-5, 1e-7}, "fused features");
  for (std::size_t i = 0; i < plain.params.size(); ++i)
    expect_close(fused_blocked_step.params[i], fused_plain_step.params[i],
                 {static_cast<std::int64_t>(plain.params[i].size())}, {1e-5, 1e-7},
                 "fused parameter gradient " + std::to_string(i));

  // Batch statistics: the blocked loops sum each channel in another order.
  ForwardContext batch_stats = ForwardContext::train(Backend::cpu);
  batch_stats.keep_activations = false;
  ForwardContext batch_stats_plain = batch_stats;
  batch_stats_plain.blocked_activations = false;
  // Through ResNet-50's 53 normalisations of 2x2 maps at batch 2 a last-bit change
  // in a mean grows to a few 1e-4 (each layer alone agrees to 1e-5: BlockedLayout).
  expect_close(encoder.forward(x, batch_stats), encoder.forward(x, batch_stats_plain), {2e-3, 2e-4},
               "features with batch statistics");
  // Inference: convolution, BatchNorm and ReLU fused, the same primitives either way.
  ForwardContext inference_plain = ForwardContext::inference(Backend::cpu);
  inference_plain.blocked_activations = false;
  expect_close(encoder.forward(x, ForwardContext::inference(Backend::cpu)), encoder.forward(x, inference_plain),
               {1e-5, 1e-7}, "inference features");
}

INSTANTIATE_TEST_SUITE_P(Presets, BlockedActivations, ::testing::Values("resnet18", "resnet50", "small"));

// Counts the ReLU inputs a pass sees in each layout.
class LayoutTally final : public ReluInputHook {
 public:
  void before_relu(const std::string&, Tensor& input) override {
    ++total;
    if (input.layout() == Layout::nhwc) ++nhwc;
    if (input.layout() != Layout::plain) ++kept;
  }
  int total = 0, nhwc = 0, kept = 0;
};

// bfloat16 convolutions: on a CPU with AMX oneDNN's kernels read and write only nhwc,
// and the activations stay in it between them (Layout::nhwc); elsewhere they stay
// blocked. Either way the step equals the one reordering into NCHW around every op
// (frozen BatchNorm: the same arithmetic in every layout).
TEST(Bf16Activations, StayInTheConvolutionsLayoutAndGiveThePlainLayoutStep) {
  BT_SKIP_UNLESS_COMPUTES(Backend::cpu, DType::bf16);
  EncoderSpec spec = EncoderSpec::preset_spec("resnet18");
  spec.in_channels = 1;
  Encoder encoder(spec, 5);
  const Tensor x = random_tensor({2, 1, 64, 64}, 3);
  ForwardContext frozen = ForwardContext::train(Backend::cpu);
  frozen.freeze_bn = true;
  frozen.compute_dtype = DType::bf16;
  const Shape features = encoder.forward(x, ForwardContext::inference(Backend::cpu)).shape();
  const std::vector<double> r = random_doubles(static_cast<std::size_t>(shape_numel(features)), 9);
  // The tally sees every ReLU input: the layers one by one, as the plain step then.
  LayoutTally tally;
  ForwardContext counted = frozen;
  counted.relu_input_hook = &tally;
  ForwardContext plain_ctx = frozen;
  plain_ctx.blocked_activations = false;
  plain_ctx.fuse_conv_bn = false;
  const LayerGradients kept = run_forward_backward(encoder, x, counted, r);
  const LayerGradients plain = run_forward_backward(encoder, x, plain_ctx, r);
  const std::string isa = kernels::cpu::effective_isa_name();
  std::printf("[bf16] %s: %d of %d ReLU inputs nhwc, %d not NCHW\n", isa.c_str(), tally.nhwc, tally.total, tally.kept);
  EXPECT_GT(tally.kept, tally.total / 2);
  if (isa.find("amx") != std::string::npos)
    EXPECT_GT(tally.nhwc, tally.total / 2) << "AMX's bf16 kernels write nhwc, which the activations should keep";
  else
    std::printf("[bf16] no AMX (%s): the bf16 kernels choose blocked layouts, nhwc not expected\n", isa.c_str());
  expect_close(kept.y, plain.y, {1e-5, 1e-7}, "features");
  ASSERT_EQ(kept.params.size(), plain.params.size());
  for (std::size_t i = 0; i < plain.params.size(); ++i)
    expect_close(kept.params[i], plain.params[i], {static_cast<std::int64_t>(plain.params[i].size())}, {1e-5, 1e-7},
                 "parameter gradient " + std::to_string(i));
  // Trained inside the convolutions, the same in either layout.
  ForwardContext fused_plain = frozen;
  fused_plain.blocked_activations = false;
  const LayerGradients fused_kept = run_forward_backward(encoder, x, frozen, r);
  const LayerGradients fused_plain_step = run_forward_backward(encoder, x, fused_plain, r);
  expect_close(fused_kept.y, fused_plain_step.y, {1e-5, 1e-7}, "fused features");
  for (std::size_t i = 0; i < plain.params.size(); ++i)
    expect_close(fused_kept.params[i], fused_plain_step.params[i], {static_cast<std::int64_t>(plain.params[i].size())},
                 {1e-5, 1e-7}, "fused parameter gradient " + std::to_string(i));
}

}  // namespace
}  // namespace bigtrain::net
