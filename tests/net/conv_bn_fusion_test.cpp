// Convolution + BatchNorm (+ residual add) (+ ReLU) fusion in whole networks
// (net/conv_bn_fusion.hpp): the fused forward equals the layer-by-layer one (bit for
// bit on the reference backend, within float rounding elsewhere) for every preset's
// stem, blocks and shortcuts, in inference and in a frozen-BatchNorm pass 1; passes
// that keep activations or use batch statistics are never fused.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "net/conv_bn_fusion.hpp"
#include "kernels/core/allocator.hpp"
#include "net/model.hpp"
#include "tests/net/net_testing.hpp"

namespace bigtrain::net {
namespace {

using namespace bigtrain::testing;

// A trained network's BatchNorms are far from the identity they start as: random
// running statistics, scales and shifts make a wrong fusion (a missing or doubled
// normalisation, a channel off by one) change the output.
void randomise_batch_norms(Model& model) {
  StateRefs refs = model.state();
  std::uint64_t seed = 1000;
  for (Buffer* buffer : refs.buffers) {
    const bool variance = buffer->name.ends_with("running_var");
    buffer->value = random_tensor(buffer->value.shape(), ++seed, variance ? 0.5f : -0.2f, variance ? 2.0f : 0.2f);
  }
  for (Parameter* parameter : refs.parameters) {
    if (parameter->value.rank() != 1 || parameter->name.starts_with("fc.")) continue;  // BatchNorm's gamma, beta
    const bool gamma = parameter->name.ends_with("weight");
    parameter->value = random_tensor(parameter->value.shape(), ++seed, gamma ? 0.6f : -0.3f, gamma ? 1.4f : 0.3f);
  }
}

struct Preset {
  std::string name;
  std::int64_t side;
};
void PrintTo(const Preset& p, std::ostream* os) { *os << p.name; }  // gtest prints the name, not bytes

ModelSpec grey_model(const std::string& preset) { return net::testing::grey_preset(preset, 5); }

std::vector<float> logits_of(Model& model, const Tensor& x, ForwardContext ctx, bool fuse) {
  ctx.fuse_conv_bn = fuse;
  return model.forward(x, ctx).to(Device::cpu()).to_vector();
}

class ConvBnFusion : public ::testing::TestWithParam<std::tuple<Backend, Preset>> {};

TEST_P(ConvBnFusion, FusedForwardEqualsTheLayers) {
  const auto& [backend, preset] = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  Model model(grey_model(preset.name), 7);
  randomise_batch_norms(model);
  model.to(backend_device(backend));
  const Tensor x = on_backend(random_tensor({2, 1, preset.side, preset.side}, 3), backend);

  ForwardContext frozen_pass1{.backend = backend, .training = true, .keep_activations = false, .freeze_bn = true};
  for (const auto& [what, ctx] : {std::pair{"inference", ForwardContext::inference(backend)},
                                  std::pair{"frozen-BatchNorm pass 1", frozen_pass1}}) {
    SCOPED_TRACE(what);
    ASSERT_TRUE(fuses_conv_bn(ctx));
    const std::vector<float> fused = logits_of(model, x, ctx, true), layers = logits_of(model, x, ctx, false);
    if (backend == Backend::reference) {
      // The reference's fused op runs the layers' own loops (kernels/reference/conv2d.cpp).
      EXPECT_EQ(fused, layers);
    } else {
      // oneDNN applies BatchNorm as a multiply and an add after the convolution's
      // sum, the layers as one a*x+b (cuDNN: BatchNorm in float32 vs double):
      // a rounding or two per layer, through ~50 layers.
      const std::vector<double> fused_d(fused.begin(), fused.end()), layers_d(layers.begin(), layers.end());
      expect_close(fused_d, layers_d, {2, 5}, {1e-5, 0.0}, "logits");
    }
    EXPECT_EQ(model.encoder().saved_count(), 0u);
  }
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<Backend, Preset>>& info) {
  return std::string(backend_name(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name;
}

// ResNet-18/50: BasicBlock and Bottleneck, with and without downsampling shortcuts,
// behind torchvision's 7x7 stem and max pool; `small`: conv+BN+ReLU in a Sequential;
// resnet20: the CIFAR stem. Sides just large enough to reach every stage.
INSTANTIATE_TEST_SUITE_P(Presets, ConvBnFusion,
                         ::testing::Combine(::testing::ValuesIn(all_backends()),
                                            ::testing::Values(Preset{"resnet18", 64}, Preset{"resnet50", 64},
                                                              Preset{"small", 40}, Preset{"resnet20", 24})),
                         case_name);

TEST(ConvBnFusionScope, OnlyPassesWithRunningStatisticsFuse) {
  const Backend b = Backend::cpu;
  EXPECT_TRUE(fuses_conv_bn(ForwardContext::inference(b)));
  EXPECT_TRUE(fuses_conv_bn({.backend = b, .training = true, .keep_activations = false, .freeze_bn = true}));
  // Frozen BatchNorm trains fused too (kernels/frozen_norm_conv.hpp).
  EXPECT_TRUE(fuses_conv_bn({.backend = b, .training = true, .keep_activations = true, .freeze_bn = true}));
  EXPECT_FALSE(fuses_conv_bn(ForwardContext::train(b)));
  // Batch statistics are only known after the convolution's whole output.
  EXPECT_FALSE(fuses_conv_bn({.backend = b, .training = true, .keep_activations = false}));
  ForwardContext off = ForwardContext::inference(b);
  off.fuse_conv_bn = false;
  EXPECT_FALSE(fuses_conv_bn(off));
}

// Training with frozen BatchNorm fused into the convolutions: every gradient of the
// whole network equals the layer-by-layer step's. On the reference backend the fused
// forward runs the layers' own loops, so both forwards are the same bits, no ReLU
// input can fall on the other side of its kink, and the gradients differ only by
// how BatchNorm's are summed (from u directly, or from the weight gradient).
class FrozenNormTraining : public ::testing::TestWithParam<Preset> {};

TEST_P(FrozenNormTraining, GradientsEqualTheLayers) {
  const Preset& preset = GetParam();
  Model model(grey_model(preset.name), 7);
  randomise_batch_norms(model);
  const Tensor x = random_tensor({2, 1, preset.side, preset.side}, 3);
  const Tensor dlogits = random_tensor({2, 5}, 4);
  ForwardContext ctx{.backend = Backend::reference, .training = true, .keep_activations = true, .freeze_bn = true};
  ctx.fuse_narrow_training_convs = true;  // `small` and resnet20 are narrow
  ASSERT_TRUE(fuses_conv_bn(ctx));
  auto step = [&](bool fuse) {
    ctx.fuse_conv_bn = fuse;
    model.zero_grad();
    const std::vector<float> logits = model.forward(x, ctx).to_vector();
    model.backward(dlogits);
    EXPECT_EQ(model.encoder().saved_count(), 0u);
    std::vector<std::vector<double>> gradients{std::vector<double>(logits.begin(), logits.end())};
    for (Parameter* p : model.parameters()) gradients.push_back(to_doubles(p->grad));
    return gradients;
  };
  const auto fused = step(true), layers = step(false);
  EXPECT_EQ(fused[0], layers[0]) << "the logits";
  const std::vector<Parameter*> parameters = model.parameters();
  ASSERT_EQ(fused.size(), parameters.size() + 1);
  for (std::size_t i = 1; i < fused.size(); ++i)
    expect_close(fused[i], layers[i], parameters[i - 1]->value.shape(), {1e-5, 1e-7}, parameters[i - 1]->name);
}

INSTANTIATE_TEST_SUITE_P(Presets, FrozenNormTraining,
                         ::testing::Values(Preset{"resnet18", 64}, Preset{"resnet50", 64}, Preset{"small", 40},
                                           Preset{"resnet20", 24}),
                         [](const ::testing::TestParamInfo<Preset>& info) { return info.param.name; });

// A fused kept forward saves only each convolution's input and the masks: the
// convolutions' own outputs are never held.
TEST(ConvBnFusionScope, AFusedKeptForwardHoldsHalfTheActivations) {
  Model model(grey_model("resnet50"), 7);
  const Tensor x = random_tensor({2, 1, 64, 64}, 3);
  Allocator& host = allocator_for(Device::cpu());
  auto held = [&](bool fuse) {
    ForwardContext kept{.backend = Backend::cpu, .training = true, .keep_activations = true, .freeze_bn = true};
    kept.fuse_conv_bn = fuse;
    const std::size_t before = host.stats().current_bytes;
    const Tensor logits = model.forward(x, kept);
    const std::size_t bytes = host.stats().current_bytes - before;
    EXPECT_GT(model.encoder().saved_count(), 0u);
    model.clear_saved();
    return bytes;
  };
  const std::size_t layers = held(false), fused = held(true);
  std::printf("[fusion] resnet50 64x64 batch 2, kept forward: layer by layer %zu B, fused %zu B\n", layers, fused);
  EXPECT_LT(fused, layers * 6 / 10);
}

}  // namespace
}  // namespace bigtrain::net
