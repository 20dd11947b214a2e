// BatchNorm with the following ReLU fused (BatchNormSpec::relu): on every backend
// and CPU layout (NCHW, nChw8c, nChw16c, nhwc), each of the four passes gives exactly what BatchNorm then ReLU
// (and, backward, ReLU's gradient then BatchNorm's) give on the same backend, and
// the CPU's fused loops agree with the reference backend's composition. A fused
// backward needs the forward's output, and is refused without it. The same for the
// residual add fused before the ReLU (BatchNormSpec::residual).
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "kernels/batch_norm.hpp"
#include "kernels/core/error.hpp"
#include "kernels/elementwise.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using namespace bigtrain::testing;

struct Passes {
  Tensor y, mean, invstd, running_mean, running_var, y_frozen;
  Tensor dx, dgamma, dbeta, dx_frozen, dgamma_frozen, dbeta_frozen;
};

struct Inputs {
  BatchNormSpec spec;
  Tensor x, dy, gamma, beta, running_mean, running_var;
};

Inputs make_inputs(std::int64_t channels) {
  Inputs in;
  in.spec.batch = 3, in.spec.channels = channels, in.spec.height = 5, in.spec.width = 7;
  // Inputs around 0 after normalisation: about half of them meet the ReLU's clamp.
  in.x = random_tensor(in.spec.input_shape(), 1, -2.0f, 2.0f);
  in.dy = random_tensor(in.spec.input_shape(), 2);
  in.gamma = random_tensor({channels}, 3, 0.5f, 1.5f);
  in.beta = random_tensor({channels}, 4, -0.5f, 0.5f);
  in.running_mean = random_tensor({channels}, 5, -0.5f, 0.5f);
  in.running_var = random_tensor({channels}, 6, 0.5f, 2.0f);
  return in;
}

// All four passes with the ReLU fused into the op (fused) or as its own op after
// it (not fused), on `backend`, activations in `layout` (CPU) or NCHW.
Passes run(const Inputs& in, Backend backend, Layout layout, bool fused) {
  BatchNormSpec spec = in.spec;
  spec.relu = fused;
  auto op = make_batch_norm(backend, spec);
  const auto put = [&](const Tensor& t) { return on_backend(t, backend); };
  const auto activation = [&](const Tensor& t) { return put(t).to_layout(layout); };
  const Tensor x = activation(in.x), dy = activation(in.dy), gamma = put(in.gamma), beta = put(in.beta);
  const Tensor rm = put(in.running_mean), rv = put(in.running_var);
  const Shape data = spec.input_shape(), channel = spec.channel_shape();
  const Device device = backend_device(backend);
  const auto empty = [&](const Shape& shape) { return Tensor::empty(shape, DType::f32, device); };

  Passes p;
  p.y = empty(data), p.mean = empty(channel), p.invstd = empty(channel);
  p.running_mean = rm.clone(), p.running_var = rv.clone();
  op->forward_training(x, gamma, beta, p.y, p.mean, p.invstd, &p.running_mean, &p.running_var, 0.1f);
  p.y_frozen = empty(data);
  op->forward_inference(x, gamma, beta, rm, rv, p.y_frozen);
  if (!fused) {
    relu_forward(backend, p.y, p.y);
    relu_forward(backend, p.y_frozen, p.y_frozen);
  }

  // Unfused, the ReLU's backward first; fused, the op takes the output instead.
  const auto through_relu = [&](const Tensor& y) {
    if (fused) return dy;
    Tensor masked = empty(data);
    relu_backward(backend, y, dy, masked);
    return masked;
  };
  p.dx = empty(data), p.dgamma = empty(channel), p.dbeta = empty(channel);
  op->backward_training(x, through_relu(p.y), gamma, p.mean, p.invstd, p.dx, p.dgamma, p.dbeta,
                        fused ? &p.y : nullptr);
  p.dx_frozen = empty(data), p.dgamma_frozen = empty(channel), p.dbeta_frozen = empty(channel);
  op->backward_inference(x, through_relu(p.y_frozen), gamma, rm, rv, p.dx_frozen, p.dgamma_frozen,
                         p.dbeta_frozen, fused ? &p.y_frozen : nullptr);
  return p;
}

std::vector<std::pair<const char*, Tensor Passes::*>> every_output() {
  return {{"training y", &Passes::y},
          {"batch mean", &Passes::mean},
          {"batch invstd", &Passes::invstd},
          {"running mean", &Passes::running_mean},
          {"running var", &Passes::running_var},
          {"frozen y", &Passes::y_frozen},
          {"training dx", &Passes::dx},
          {"training dgamma", &Passes::dgamma},
          {"training dbeta", &Passes::dbeta},
          {"frozen dx", &Passes::dx_frozen},
          {"frozen dgamma", &Passes::dgamma_frozen},
          {"frozen dbeta", &Passes::dbeta_frozen}};
}

// Two whole blocks; for nhwc a count 16 does not divide, so the vector loops' tails run.
std::int64_t test_channels(Layout layout) {
  if (layout == Layout::nhwc) return 40;
  return 2 * layout_block(layout == Layout::plain ? Layout::blocked16 : layout);
}

using Case = std::tuple<Backend, Layout>;

class BatchNormRelu : public ::testing::TestWithParam<Case> {};

TEST_P(BatchNormRelu, EqualsBatchNormThenReluExactly) {
  const auto [backend, layout] = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const Inputs in = make_inputs(test_channels(layout));
  const Passes fused = run(in, backend, layout, true), separate = run(in, backend, layout, false);
  EXPECT_EQ(fused.y.layout(), layout);
  EXPECT_EQ(fused.dx.layout(), layout);
  std::int64_t clamped = 0;
  for (float v : fused.y.to_vector()) clamped += v == 0.0f;
  EXPECT_GT(clamped, fused.y.numel() / 5) << "the inputs should exercise the clamp";
  EXPECT_LT(clamped, fused.y.numel() * 4 / 5);
  // The same arithmetic on the same values in the same order: the same bits.
  for (const auto& [what, member] : every_output())
    EXPECT_EQ((fused.*member).to_vector(), (separate.*member).to_vector()) << what;
}

TEST_P(BatchNormRelu, AgreesWithTheReferenceBackend) {
  const auto [backend, layout] = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const Inputs in = make_inputs(test_channels(layout));
  const Passes actual = run(in, backend, layout, true), expected = run(in, Backend::reference, Layout::plain, true);
  // Float sums in another order; an element that lands within rounding of the
  // clamp could flip, which these inputs do not come near.
  const Tolerance tolerance{1e-4, 1e-5};
  for (const auto& [what, member] : every_output())
    expect_close(actual.*member, expected.*member, tolerance, what);
}

TEST_P(BatchNormRelu, BackwardNeedsTheOutputExactlyWhenFused) {
  const auto [backend, layout] = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const Inputs in = make_inputs(2 * layout_block(Layout::blocked16));
  const Device device = backend_device(backend);
  const Tensor x = on_backend(in.x, backend), dy = on_backend(in.dy, backend);
  const Tensor gamma = on_backend(in.gamma, backend), channels = on_backend(in.running_var, backend);
  Tensor dx = Tensor::empty(in.spec.input_shape(), DType::f32, device);
  Tensor dgamma = Tensor::empty(in.spec.channel_shape(), DType::f32, device), dbeta = dgamma.clone();
  BatchNormSpec fused = in.spec;
  fused.relu = true;
  auto with_relu = make_batch_norm(backend, fused);
  auto without = make_batch_norm(backend, in.spec);
  EXPECT_THROW(with_relu->backward_training(x, dy, gamma, channels, channels, dx, dgamma, dbeta, nullptr), Error);
  EXPECT_THROW(with_relu->backward_inference(x, dy, gamma, channels, channels, dx, dgamma, dbeta, nullptr), Error);
  EXPECT_THROW(without->backward_training(x, dy, gamma, channels, channels, dx, dgamma, dbeta, &x), Error);
  const Tensor wrong_shape = on_backend(Tensor::zeros({1, 1, 1, 1}), backend);
  EXPECT_THROW(with_relu->backward_training(x, dy, gamma, channels, channels, dx, dgamma, dbeta, &wrong_shape),
               Error);
}

// The end of a residual block (BatchNormSpec::residual): relu(bn(x) + r) in one op
// equals BatchNorm, add and ReLU one after the other, bit for bit, forward with batch
// and running statistics; backward is BatchNorm's own on the gradient at the sum.
TEST_P(BatchNormRelu, ResidualThenReluEqualsTheThreeOpsExactly) {
  const auto [backend, layout] = GetParam();
  BT_SKIP_UNLESS_AVAILABLE(backend);
  const Inputs in = make_inputs(test_channels(layout));
  const auto put = [&](const Tensor& t) { return on_backend(t, backend); };
  const Device device = backend_device(backend);
  const auto empty = [&](const Shape& shape) { return Tensor::empty(shape, DType::f32, device); };
  const Shape data = in.spec.input_shape(), channel = in.spec.channel_shape();
  const Tensor x = put(in.x).to_layout(layout), dy = put(in.dy).to_layout(layout);
  // The shortcut in NCHW whatever the activations' layout: the op brings it over.
  const Tensor residual = put(random_tensor(data, 9, -1.0f, 1.0f));
  const Tensor gamma = put(in.gamma), beta = put(in.beta), rm = put(in.running_mean), rv = put(in.running_var);
  BatchNormSpec fused_spec = in.spec;
  fused_spec.relu = fused_spec.residual = true;
  auto fused = make_batch_norm(backend, fused_spec), plain = make_batch_norm(backend, in.spec);

  for (const bool batch_statistics : {true, false}) {
    SCOPED_TRACE(batch_statistics ? "batch statistics" : "running statistics");
    Tensor y = empty(data), mean = empty(channel), invstd = empty(channel);
    Tensor expected = empty(data), expected_mean = empty(channel), expected_invstd = empty(channel);
    Tensor running_mean = rm.clone(), running_var = rv.clone();
    Tensor expected_running_mean = rm.clone(), expected_running_var = rv.clone();
    if (batch_statistics) {
      fused->forward_training(x, gamma, beta, y, mean, invstd, &running_mean, &running_var, 0.1f, &residual);
      plain->forward_training(x, gamma, beta, expected, expected_mean, expected_invstd, &expected_running_mean,
                              &expected_running_var, 0.1f);
      EXPECT_EQ(mean.to_vector(), expected_mean.to_vector());
      EXPECT_EQ(invstd.to_vector(), expected_invstd.to_vector());
      EXPECT_EQ(running_var.to_vector(), expected_running_var.to_vector());
    } else {
      fused->forward_inference(x, gamma, beta, rm, rv, y, &residual);
      plain->forward_inference(x, gamma, beta, rm, rv, expected);
    }
    add(backend, expected, residual, expected);
    relu_forward(backend, expected, expected);
    EXPECT_EQ(y.layout(), layout);
    const std::vector<float> values = y.to_vector();
    EXPECT_EQ(values, expected.to_vector());
    std::int64_t clamped = 0;
    for (float v : values) clamped += v == 0.0f;
    EXPECT_GT(clamped, y.numel() / 10) << "the inputs should exercise the clamp";
    EXPECT_LT(clamped, y.numel() * 9 / 10);

    // Backward takes the gradient at the sum (the caller applied the ReLU's mask).
    Tensor at_sum = empty(data);
    relu_backward(backend, y, dy, at_sum);
    Tensor dx = empty(data), dgamma = empty(channel), dbeta = empty(channel);
    Tensor expected_dx = empty(data), expected_dgamma = empty(channel), expected_dbeta = empty(channel);
    if (batch_statistics) {
      fused->backward_training(x, at_sum, gamma, mean, invstd, dx, dgamma, dbeta, nullptr);
      plain->backward_training(x, at_sum, gamma, mean, invstd, expected_dx, expected_dgamma, expected_dbeta, nullptr);
    } else {
      fused->backward_inference(x, at_sum, gamma, rm, rv, dx, dgamma, dbeta, nullptr);
      plain->backward_inference(x, at_sum, gamma, rm, rv, expected_dx, expected_dgamma, expected_dbeta, nullptr);
    }
    EXPECT_EQ(dx.to_vector(), expected_dx.to_vector());
    EXPECT_EQ(dgamma.to_vector(), expected_dgamma.to_vector());
    EXPECT_EQ(dbeta.to_vector(), expected_dbeta.to_vector());
    EXPECT_THROW(fused->backward_training(x, at_sum, gamma, mean, invstd, dx, dgamma, dbeta, &y), Error)
        << "with a residual the block's ReLU masks the gradient, not this op";
  }
  Tensor y = empty(data);
  EXPECT_THROW(fused->forward_inference(x, gamma, beta, rm, rv, y), Error) << "built to add a residual, none given";
  EXPECT_THROW(plain->forward_inference(x, gamma, beta, rm, rv, y, &residual), Error) << "not built for one";
}

std::vector<Case> cases() {
  return {{Backend::reference, Layout::plain}, {Backend::cpu, Layout::plain}, {Backend::cpu, Layout::blocked8},
          {Backend::cpu, Layout::blocked16}, {Backend::cpu, Layout::nhwc}, {Backend::cuda, Layout::plain}};
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(backend_name(std::get<0>(info.param))) + "_" + layout_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Cases, BatchNormRelu, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace bigtrain::kernels
