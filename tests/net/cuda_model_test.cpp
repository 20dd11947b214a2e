// Whole networks on the CUDA backend against the CPU backend: the same weights,
// the same batch, the same training step (forward with batch statistics, backward,
// SGD update, running statistics) must agree within float tolerances. Skips, saying
// why, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "kernels/cross_entropy.hpp"
#include "net/model.hpp"
#include "net/optimizer.hpp"
#include "tests/net/net_testing.hpp"

namespace bigtrain::net {
namespace {

using namespace bigtrain::net::testing;

ModelSpec model_spec(const std::string& preset, std::int64_t in_channels, std::int64_t classes) {
  ModelSpec spec;
  spec.encoder = EncoderSpec::preset_spec(preset);
  spec.encoder.in_channels = in_channels;
  spec.num_classes = classes;
  return spec;
}

struct StepResult {
  std::vector<double> logits;
  float loss = 0.0f;
  std::vector<std::vector<double>> grads;       // parameters() order
  std::map<std::string, std::vector<double>> state;  // after the SGD step (weights and running statistics)
};

// One training step as the trainer runs it: forward (training, activations kept),
// cross-entropy, backward, SGD with momentum and weight decay.
StepResult train_step(Model& model, Backend backend, const Tensor& host_x, const Tensor& host_targets) {
  const Device device = backend_device(backend);
  model.to(device);
  Sgd optimizer(split_decay_groups(model.parameters()), SgdOptions{0.05, 0.9, 0.0, 1e-4, false}, backend);
  model.zero_grad();
  const Tensor logits = model.forward(host_x.to(device), ForwardContext::train(backend));
  Tensor dlogits = Tensor::empty(logits.shape(), DType::f32, device);
  StepResult result;
  result.loss = kernels::cross_entropy(backend, logits, host_targets.to(device), nullptr, {}, dlogits);
  result.logits = to_doubles(logits);
  model.backward(dlogits);
  for (Parameter* p : model.parameters()) result.grads.push_back(to_doubles(p->grad));
  optimizer.step();
  for (const auto& [name, stored] : model.state_dict()) {
    if (stored.dtype == StoredDType::F32) result.state[name] = to_doubles(stored.to_f32());
  }
  return result;
}

class CudaModel : public ::testing::Test {
 protected:
  void SetUp() override { BT_SKIP_UNLESS_AVAILABLE(Backend::cuda); }
};

// ResNet-18 (BasicBlocks, every op of the encoder: strided and 1x1 convolutions,
// training BatchNorm, ReLU, max pool, residual adds, global average pool, linear
// head) on a batch of 4 grayscale 64x64 tiles.
TEST_F(CudaModel, ResNet18TrainingStepEqualsCpu) {
  const ModelSpec spec = model_spec("resnet18", 1, 10);
  Model cpu_model(spec, 21), cuda_model(spec, 21);
  const Tensor x = random_tensor({4, 1, 64, 64}, 22);
  Tensor targets = Tensor::empty({4}, DType::i32);
  for (int i = 0; i < 4; ++i) targets.data<std::int32_t>()[i] = (3 * i) % 10;

  const StepResult expected = train_step(cpu_model, Backend::cpu, x, targets);
  const StepResult actual = train_step(cuda_model, Backend::cuda, x, targets);

  // cuDNN and oneDNN sum each convolution in different orders (~sqrt(K) float eps
  // relative per layer, K up to 4608). Training BatchNorm in layer4 normalises by
  // standard deviations of 4x2x2 = 16 values per channel and its backward subtracts
  // nearly equal terms, which amplifies those differences layer by layer; through
  // 20 layers they reach ~1e-4 of a tensor's rms. 2e-3 of the rms leaves margin,
  // while a wrong stride, padding, algorithm or gradient route is O(1).
  const Tolerance tolerance{2e-3, 0.0};
  expect_close(actual.logits, expected.logits, {4, 10}, tolerance, "logits");
  EXPECT_NEAR(actual.loss, expected.loss, 2e-3 * std::abs(expected.loss));
  const std::vector<Parameter*> parameters = cpu_model.parameters();
  ASSERT_EQ(actual.grads.size(), expected.grads.size());
  for (std::size_t i = 0; i < parameters.size(); ++i)
    expect_close(actual.grads[i], expected.grads[i], parameters[i]->value.shape(), tolerance,
                 "d " + parameters[i]->name);
  // After the update: weights (moved by lr * the gradient above) and the running
  // statistics (updated once, with PyTorch's unbiased variance on both backends).
  ASSERT_EQ(actual.state.size(), expected.state.size());
  for (const auto& [name, values] : expected.state) {
    ASSERT_TRUE(actual.state.count(name)) << name;
    expect_close(actual.state.at(name), values, {static_cast<std::int64_t>(values.size())}, tolerance,
                 "after the step: " + name);
  }
  EXPECT_EQ(cuda_model.encoder().saved_count(), 0u);
}

// Inference (running statistics, no saved activations) of a ResNet-50 bottleneck
// network with an 11x11 stride-4 stem, the configuration of large tiles.
TEST_F(CudaModel, ResNet50InferenceEqualsCpu) {
  ModelSpec spec = model_spec("resnet50", 1, 3);
  spec.encoder.stem = StemSpec{11, 4, 5, true};
  Model cpu_model(spec, 31), cuda_model(spec, 31);
  cuda_model.to(Device::cuda());
  const Tensor x = random_tensor({2, 1, 128, 128}, 32);
  const Tensor expected = cpu_model.forward(x, ForwardContext::inference(Backend::cpu));
  const Tensor actual = cuda_model.forward(x.to(Device::cuda()), ForwardContext::inference(Backend::cuda));
  // Inference BatchNorm is affine: only the convolutions' summation order differs
  // (~sqrt(K) eps per layer over ~50 layers): 1e-4 of the rms is ample.
  expect_close(actual, expected, {1e-4, 0.0}, "logits");
  EXPECT_EQ(cuda_model.encoder().saved_count(), 0u);
}

}  // namespace
}  // namespace bigtrain::net
