// A whole training step in bfloat16 mixed precision on CUDA against the same step
// on the reference backend, which defines mixed precision (operands rounded to
// bf16, float32 results; kernels/reference/round_to_dtype.hpp). The CPU backend
// computes float32 only. Skips, saying why, without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cross_entropy.hpp"
#include "net/model.hpp"
#include "net/optimizer.hpp"
#include "tests/net/net_testing.hpp"

namespace bigtrain::net {
namespace {

using namespace bigtrain::net::testing;

struct MixedStep {
  std::vector<double> logits;
  std::vector<std::vector<double>> grads;  // parameters() order
  std::vector<std::vector<double>> after;  // parameter values after the SGD step
};

MixedStep bf16_step(Model& model, Backend backend, const Tensor& host_x, const Tensor& host_targets) {
  const Device device = backend_device(backend);
  model.to(device);
  Sgd optimizer(split_decay_groups(model.parameters()), SgdOptions{0.05, 0.9, 0.0, 1e-4, false}, backend);
  model.zero_grad();
  ForwardContext ctx = ForwardContext::train(backend);
  ctx.compute_dtype = DType::bf16;
  const Tensor logits = model.forward(host_x.to(device), ctx);
  Tensor dlogits = Tensor::empty(logits.shape(), DType::f32, device);
  kernels::cross_entropy(backend, logits, host_targets.to(device), nullptr, {}, dlogits);
  MixedStep result;
  result.logits = to_doubles(logits);
  model.backward(dlogits);
  for (Parameter* p : model.parameters()) result.grads.push_back(to_doubles(p->grad));
  optimizer.step();
  for (Parameter* p : model.parameters()) result.after.push_back(to_doubles(p->value));
  return result;
}

TEST(CudaMixedPrecision, ResNet18Bf16TrainingStepEqualsTheReference) {
  BT_SKIP_UNLESS_AVAILABLE(Backend::cuda);
  ModelSpec spec;
  spec.encoder = EncoderSpec::preset_spec("resnet18");
  spec.encoder.in_channels = 1;
  spec.num_classes = 10;
  Model reference_model(spec, 41), cuda_model(spec, 41);
  const Tensor x = random_tensor({4, 1, 64, 64}, 42);
  Tensor targets = Tensor::empty({4}, DType::i32);
  for (int i = 0; i < 4; ++i) targets.data<std::int32_t>()[i] = (3 * i) % 10;

  const MixedStep expected = bf16_step(reference_model, Backend::reference, x, targets);
  const MixedStep actual = bf16_step(cuda_model, Backend::cuda, x, targets);

  // Both round every convolution's operands to bf16 the same way; cuDNN then
  // also rounds each result (y, dx, dw) to bf16 (unit roundoff 2^-8 = 0.4%) and
  // sums in another order. A value pushed across a rounding boundary of the next
  // layer's input moves by one bf16 ulp, and training BatchNorm amplifies such
  // differences (CudaModel.ResNet18TrainingStepEqualsCpu sees float32's 6e-8 grow
  // to ~1e-4 over 20 layers). The bound, 5% of each tensor's rms, is an estimate
  // not yet measured on a GPU (none has been lent so far): about ten bf16 ulps,
  // while a wrong type, descriptor or cast is an O(1) error. Tighten it once measured.
  const Tolerance tolerance{5e-2, 0.0};
  expect_close(actual.logits, expected.logits, {4, 10}, tolerance, "logits");
  const std::vector<Parameter*> parameters = reference_model.parameters();
  ASSERT_EQ(actual.grads.size(), expected.grads.size());
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    expect_close(actual.grads[i], expected.grads[i], parameters[i]->value.shape(), tolerance,
                 "d " + parameters[i]->name);
    expect_close(actual.after[i], expected.after[i], parameters[i]->value.shape(), tolerance,
                 "after the step: " + parameters[i]->name);
  }
}

}  // namespace
}  // namespace bigtrain::net
