// BatchNorm + ReLU as one op in whole networks (ForwardContext::fuse_norm_relu,
// kernels::BatchNormSpec::relu): a training step with it gives the same logits,
// input and parameter gradients and running statistics, bit for bit, as the
// layers one by one, for the residual blocks' pairs, their last BatchNorm with the
// shortcut's add and ReLU, and the stem's pair (a Sequential),
// with batch statistics and with frozen BatchNorm. A relu_input_hook still sees
// every ReLU input.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "kernels/cross_entropy.hpp"
#include "net/model.hpp"
#include "tests/net/net_testing.hpp"

namespace bigtrain::net {
namespace {

using namespace bigtrain::testing;

struct StepResult {
  std::vector<float> logits, input_gradient;
  std::vector<std::vector<float>> gradients, buffers;
};

ModelSpec grey_model(const std::string& preset) { return net::testing::grey_preset(preset, 3); }

StepResult training_step(const std::string& preset, std::int64_t side, Backend backend, bool freeze_bn, bool fuse) {
  Model model(grey_model(preset), 7);
  model.to(backend_device(backend));
  model.encoder().set_input_grad(true);
  const Tensor x = on_backend(random_tensor({2, 1, side, side}, 3), backend);
  ForwardContext ctx = ForwardContext::train(backend);
  ctx.freeze_bn = freeze_bn;
  ctx.fuse_norm_relu = fuse;
  const Tensor logits = model.forward(x, ctx);
  Tensor labels = Tensor::empty({2}, DType::i32);
  labels.data<std::int32_t>()[0] = 0, labels.data<std::int32_t>()[1] = 2;
  Tensor dlogits = Tensor::empty(logits.shape(), DType::f32, logits.device());
  kernels::cross_entropy(backend, logits, on_backend(labels, backend), nullptr, {}, dlogits);
  StepResult result;
  result.input_gradient = model.backward(dlogits).to(Device::cpu()).to_vector();
  result.logits = logits.to(Device::cpu()).to_vector();
  for (Parameter* parameter : model.parameters()) result.gradients.push_back(parameter->grad.to(Device::cpu()).to_vector());
  for (Buffer* buffer : model.state().buffers) result.buffers.push_back(buffer->value.to(Device::cpu()).to_vector());
  EXPECT_EQ(model.encoder().saved_count(), 0u) << "backward must pop every kept forward";
  return result;
}

using Case = std::tuple<Backend, std::string, bool>;  // backend, preset, frozen BatchNorm

class NormReluFusion : public ::testing::TestWithParam<Case> {};

TEST_P(NormReluFusion, ATrainingStepEqualsTheLayersBitForBit) {
  const auto& [backend, preset, frozen] = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const std::int64_t side = preset == "resnet20" ? 24 : 64;
  const StepResult fused = training_step(preset, side, backend, frozen, true);
  const StepResult layers = training_step(preset, side, backend, frozen, false);
  EXPECT_EQ(fused.logits, layers.logits);
  EXPECT_EQ(fused.input_gradient, layers.input_gradient);
  ASSERT_EQ(fused.gradients.size(), layers.gradients.size());
  for (std::size_t i = 0; i < fused.gradients.size(); ++i) EXPECT_EQ(fused.gradients[i], layers.gradients[i]) << i;
  ASSERT_EQ(fused.buffers.size(), layers.buffers.size());
  for (std::size_t i = 0; i < fused.buffers.size(); ++i) EXPECT_EQ(fused.buffers[i], layers.buffers[i]) << i;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(backend_name(std::get<0>(info.param))) + "_" + std::get<1>(info.param) +
         (std::get<2>(info.param) ? "_frozen" : "_batch_statistics");
}

// BasicBlock, Bottleneck, the 7x7 stem and `small`'s conv+BN+ReLU Sequential.
INSTANTIATE_TEST_SUITE_P(Presets, NormReluFusion,
                         ::testing::Combine(::testing::Values(Backend::cpu, Backend::reference, Backend::cuda),
                                            ::testing::Values("resnet18", "resnet50", "small", "resnet20"),
                                            ::testing::Bool()),
                         case_name);

// A hook that must see each ReLU's input gets it: the pairs then run unfused.
class CountingHook final : public ReluInputHook {
 public:
  void before_relu(const std::string&, Tensor&) override { ++calls; }
  int calls = 0;
};

TEST(NormReluFusionScope, AReluInputHookSeesEveryRelu) {
  Model model(grey_model("resnet18"), 7);
  const Tensor x = random_tensor({2, 1, 64, 64}, 3);
  CountingHook hook;
  ForwardContext ctx = ForwardContext::train(Backend::cpu);
  ctx.relu_input_hook = &hook;
  model.forward(x, ctx);
  // The stem's, two per BasicBlock (after bn1 and after the add), 8 blocks.
  EXPECT_EQ(hook.calls, 1 + 2 * 8);
  model.clear_saved();
}

}  // namespace
}  // namespace bigtrain::net
