// Every layer's forward and backward, on every backend: gradients against float32
// finite differences, the cpu/cuda backends against the reference backend, and the
// bookkeeping the two-pass trainer relies on (gradient accumulation, kept
// activations as a stack, nothing kept without keep_activations, op reuse across
// batch sizes).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/allocator.hpp"
#include "kernels/core/error.hpp"
#include "net/batch_norm.hpp"
#include "net/conv2d.hpp"
#include "net/dropout.hpp"
#include "net/flatten.hpp"
#include "net/global_avg_pool.hpp"
#include "net/group_norm.hpp"
#include "net/linear.hpp"
#include "net/pool2d.hpp"
#include "net/relu.hpp"
#include "net/residual_block.hpp"
#include "tests/net/net_testing.hpp"

namespace bigtrain::net {
namespace {

using namespace bigtrain::net::testing;

struct LayerCase {
  std::string name;
  std::function<std::unique_ptr<Layer>()> make;
  Shape input;
  bool training = true;
  bool freeze_bn = false;
  bool kinks = false;  // ReLU / max-pool: finite differences may straddle a kink
  // Finite-difference step (0: op_check's float32 default 5e-3). Blocks use 1e-3: a
  // BatchNorm weight moves every ReLU input of its channel at once, and with 5e-3
  // a few of them cross zero, bending the difference quotient by a few percent
  // without the sharp one-sided disagreement the kink detector looks for. The
  // smaller step costs ~eps_f32 |L| / h ~ 1e-3 of rounding noise, inside the bound.
  double step = 0.0;
};
void PrintTo(const LayerCase& c, std::ostream* os) { *os << c.name; }

template <typename T, typename... Args>
std::function<std::unique_ptr<Layer>()> maker(Args... args) {
  return [=] { return std::unique_ptr<Layer>(std::make_unique<T>(args...)); };
}

Conv2dOptions conv_options(std::int64_t in, std::int64_t out, int kh, int kw, int stride, int pad, int dilation,
                           int groups, bool bias) {
  return {in, out, kh, kw, stride, stride, pad, pad, dilation, dilation, groups, bias};
}

const std::vector<LayerCase>& layer_cases() {
  static const std::vector<LayerCase> cases{
      {"conv3x3_pad1_bias", maker<Conv2d>("c", conv_options(3, 4, 3, 3, 1, 1, 1, 1, true), 7u), {2, 3, 7, 6}},
      {"conv5x3_stride2_groups2", maker<Conv2d>("c", conv_options(4, 6, 5, 3, 2, 2, 1, 2, false), 7u), {1, 4, 9, 8}},
      {"conv3x3_dilation2", maker<Conv2d>("c", conv_options(2, 3, 3, 3, 1, 2, 2, 1, true), 7u), {2, 2, 7, 7}},
      {"conv1x1_stride2_batch1", maker<Conv2d>("c", conv_options(4, 8, 1, 1, 2, 0, 1, 1, false), 7u), {1, 4, 7, 5}},
      {"conv11x11_stride4_stem", maker<Conv2d>("c", conv_options(1, 4, 11, 11, 4, 5, 1, 1, false), 7u), {2, 1, 23, 21}},
      {"batch_norm_training", maker<BatchNorm2d>("bn", std::int64_t{4}), {3, 4, 5, 3}},
      {"batch_norm_frozen", maker<BatchNorm2d>("bn", std::int64_t{4}), {3, 4, 5, 3}, true, true},
      {"batch_norm_eval", maker<BatchNorm2d>("bn", std::int64_t{4}), {2, 4, 3, 3}, false},
      {"group_norm_training", maker<GroupNorm>("bn", std::int64_t{4}, std::int64_t{8}), {3, 8, 5, 3}},
      {"group_norm_eval_one_group", maker<GroupNorm>("bn", std::int64_t{1}, std::int64_t{4}), {2, 4, 3, 3}, false},
      {"relu", maker<ReLU>("", false), {2, 3, 4, 5}, true, false, true},
      {"max_pool3_stride2_pad1", maker<MaxPool2d>("", Pool2dOptions{3, 2, 1}), {2, 3, 7, 8}, true, false, true},
      {"avg_pool2_stride2", maker<AvgPool2d>("", Pool2dOptions{2, 2, 0}), {2, 3, 6, 5}},
      {"avg_pool3_stride2_pad1", maker<AvgPool2d>("", Pool2dOptions{3, 2, 1, true}), {1, 2, 7, 7}},
      {"global_avg_pool", maker<GlobalAvgPool>(""), {2, 5, 3, 4}},
      {"linear", maker<Linear>("fc", std::int64_t{7}, std::int64_t{5}, std::uint64_t{3}, true), {3, 7}},
      {"linear_no_bias_batch1", maker<Linear>("fc", std::int64_t{6}, std::int64_t{4}, std::uint64_t{3}, false), {1, 6}},
      {"flatten", maker<Flatten>(""), {2, 3, 2, 2}},
      {"dropout_p0.3", maker<Dropout>("drop", 0.3f), {4, 50}},
      {"basic_block_identity", maker<BasicBlock>("layer1.0", std::int64_t{4}, std::int64_t{4}, 1, std::uint64_t{5}),
       {2, 4, 6, 5}, true, false, true, 1e-3},
      {"basic_block_downsample", maker<BasicBlock>("layer2.0", std::int64_t{4}, std::int64_t{6}, 2, std::uint64_t{5}),
       {2, 4, 7, 6}, true, false, true, 1e-3},
      {"bottleneck_downsample", maker<Bottleneck>("layer2.0", std::int64_t{8}, std::int64_t{2}, 2, std::uint64_t{5}),
       {2, 8, 5, 6}, true, false, true, 1e-3},
      {"basic_block_downsample_group_norm",
       maker<BasicBlock>("layer2.0", std::int64_t{4}, std::int64_t{6}, 2, std::uint64_t{5}, NormChoice{NormKind::group, 3}),
       {2, 4, 7, 6}, true, false, true, 1e-3},
      // Frozen BatchNorm trains inside the convolutions (net/conv_bn_fusion.hpp):
      // identity and downsampling shortcuts, both block types.
      {"bottleneck_frozen_bn", maker<Bottleneck>("layer1.0", std::int64_t{8}, std::int64_t{2}, 1, std::uint64_t{5}),
       {2, 8, 4, 4}, true, true, true, 1e-3},
      {"bottleneck_downsample_frozen_bn",
       maker<Bottleneck>("layer2.0", std::int64_t{8}, std::int64_t{2}, 2, std::uint64_t{5}), {2, 8, 6, 6}, true, true,
       true, 1e-3},
      {"basic_block_downsample_frozen_bn",
       maker<BasicBlock>("layer2.0", std::int64_t{4}, std::int64_t{6}, 2, std::uint64_t{5}), {2, 4, 7, 6}, true, true,
       true, 1e-3},
  };
  return cases;
}

ForwardContext context(Backend backend, const LayerCase& c) {
  ForwardContext ctx;
  ctx.backend = backend;
  ctx.training = c.training;
  ctx.freeze_bn = c.freeze_bn;
  ctx.dropout_seed = 1234;
  ctx.dropout_offset = 77;
  ctx.fuse_narrow_training_convs = true;  // these blocks are narrow; frozen BatchNorm trains fused
  return ctx;
}

// Random running statistics, so frozen/eval BatchNorm is not the identity-like default.
void randomise_batch_norm(Layer& layer) {
  StateRefs refs = layer.state();
  std::uint64_t seed = 500;
  for (Buffer* buffer : refs.buffers) {
    const bool variance = buffer->name.ends_with("running_var");
    buffer->value.copy_from(random_tensor(buffer->value.shape(), ++seed, variance ? 0.5f : -0.5f, variance ? 2.0f : 0.5f));
  }
  for (Parameter* parameter : refs.parameters)
    if (parameter->name.find("bn") != std::string::npos || parameter->name.find("downsample.1") != std::string::npos)
      parameter->value.copy_from(random_tensor(parameter->value.shape(), ++seed, 0.5f, 1.5f));
}

std::unique_ptr<Layer> make_on(const LayerCase& c, Backend backend) {
  std::unique_ptr<Layer> layer = c.make();
  randomise_batch_norm(*layer);
  layer->to(backend_device(backend));
  return layer;
}

using Param = std::tuple<Backend, LayerCase>;
class LayerTest : public ::testing::TestWithParam<Param> {
 protected:
  Backend backend() const { return std::get<0>(GetParam()); }
  const LayerCase& layer_case() const { return std::get<1>(GetParam()); }
};

TEST_P(LayerTest, GradientsMatchFiniteDifferences) {
  BT_SKIP_UNLESS_AVAILABLE(backend());
  const LayerCase& c = layer_case();
  auto layer = make_on(c, backend());
  const Tensor x = on_backend(random_tensor(c.input, 11), backend());
  // The reference is checked on 48 elements per tensor; the other backends on 8, as
  // MatchesReferenceBackend already ties every one of their gradients to it.
  const std::size_t elements = backend() == Backend::reference ? 48 : 8;
  check_layer_gradients(*layer, x, context(backend(), c), c.kinks, c.name, c.step, elements);
}

// Instantiated for the backends other than the reference (the oracle itself; see
// LayersAgainstReference below), so no instance skips without a reason of hardware.
class LayerAgainstReferenceTest : public LayerTest {};

TEST_P(LayerAgainstReferenceTest, MatchesReferenceBackend) {
  BT_SKIP_UNLESS_AVAILABLE(backend());
  const LayerCase& c = layer_case();
  auto oracle = make_on(c, Backend::reference);
  auto layer = make_on(c, backend());
  const Tensor x_host = random_tensor(c.input, 11);
  ForwardContext ctx = context(backend(), c);
  ForwardContext ref_ctx = context(Backend::reference, c);
  const Shape y_shape = oracle->forward(x_host, ForwardContext{.backend = Backend::reference}).shape();
  const std::vector<double> r = random_doubles(static_cast<std::size_t>(shape_numel(y_shape)), 5);
  const LayerGradients expected = run_forward_backward(*oracle, x_host, ref_ctx, r);
  const LayerGradients actual = run_forward_backward(*layer, on_backend(x_host, backend()), ctx, r);
  // Single layers sum at most a few hundred float32 terms per output (the
  // reference accumulates in double): ~sqrt(K) eps_f32 relative to the output's
  // rms; 2e-5 leaves room for K up to ~ 1e4 and for BatchNorm's two reductions.
  const Tolerance tolerance{2e-5, 1e-7};
  expect_close(actual.y, expected.y, tolerance, c.name + " y");
  ASSERT_EQ(actual.dx.empty(), expected.dx.empty());
  expect_close(actual.dx, expected.dx, c.input, tolerance, c.name + " dx");
  std::vector<Parameter*> parameters = layer->parameters();
  ASSERT_EQ(actual.params.size(), parameters.size());
  for (std::size_t i = 0; i < parameters.size(); ++i)
    expect_close(actual.params[i], expected.params[i], parameters[i]->value.shape(), tolerance,
                 c.name + " d" + parameters[i]->name);
}

// Backward adds to .grad (tile batches accumulate) and a forward saves nothing
// unless asked.
TEST_P(LayerTest, AccumulatesGradientsAndKeepsNothingUnlessAsked) {
  BT_SKIP_UNLESS_AVAILABLE(backend());
  const LayerCase& c = layer_case();
  auto layer = make_on(c, backend());
  const Tensor x = on_backend(random_tensor(c.input, 11), backend());
  ForwardContext ctx = context(backend(), c);
  ctx.update_bn_running_stats = false;
  const Tensor y = layer->forward(x, ctx);  // keep_activations is false
  EXPECT_EQ(layer->saved_count(), 0u);
  EXPECT_THROW(layer->backward(y), Error);

  const std::vector<double> r = random_doubles(static_cast<std::size_t>(y.numel()), 3);
  const LayerGradients once = run_forward_backward(*layer, x, ctx, r);
  ctx.keep_activations = true;
  layer->forward(x, ctx);
  layer->backward(from_doubles(y.shape(), r, y.device()));  // on top of `once`
  std::vector<Parameter*> parameters = layer->parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    std::vector<double> doubled = once.params[i];
    for (double& g : doubled) g *= 2.0;
    // g + g is exact in float32, so the sum of two identical batches is bit-exact.
    expect_close(to_doubles(parameters[i]->grad), doubled, parameters[i]->value.shape(), {0.0, 0.0},
                 c.name + " accumulated " + parameters[i]->name);
  }
}

// Two batches forwarded before either is backpropagated (the whole-graph oracle
// of the two-pass trainer): backward in reverse order gives each batch's gradient.
TEST_P(LayerTest, KeptActivationsAreAStack) {
  BT_SKIP_UNLESS_AVAILABLE(backend());
  const LayerCase& c = layer_case();
  auto layer = make_on(c, backend());
  ForwardContext ctx = context(backend(), c);
  ctx.update_bn_running_stats = false;
  const Tensor a = on_backend(random_tensor(c.input, 21), backend());
  const Tensor b = on_backend(random_tensor(c.input, 22), backend());
  const std::size_t outputs = static_cast<std::size_t>(layer->forward(a, ctx).numel());
  const std::vector<double> ra = random_doubles(outputs, 31), rb = random_doubles(outputs, 32);
  const LayerGradients alone_a = run_forward_backward(*layer, a, ctx, ra);
  const LayerGradients alone_b = run_forward_backward(*layer, b, ctx, rb);

  layer->zero_grad();
  ctx.keep_activations = true;
  const Tensor ya = layer->forward(a, ctx);
  const Tensor yb = layer->forward(b, ctx);
  const Tensor db = layer->backward(from_doubles(yb.shape(), rb, yb.device()));
  const Tensor da = layer->backward(from_doubles(ya.shape(), ra, ya.device()));
  EXPECT_EQ(layer->saved_count(), 0u);
  if (!alone_a.dx.empty()) {
    expect_close(to_doubles(da), alone_a.dx, c.input, {0.0, 0.0}, c.name + " stacked dx of batch a");
    expect_close(to_doubles(db), alone_b.dx, c.input, {0.0, 0.0}, c.name + " stacked dx of batch b");
  }
  std::vector<Parameter*> parameters = layer->parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    std::vector<double> sum = alone_b.params[i];
    for (std::size_t k = 0; k < sum.size(); ++k)
      sum[k] = static_cast<double>(static_cast<float>(alone_b.params[i][k]) + static_cast<float>(alone_a.params[i][k]));
    // Same float32 additions in the same order (b's gradient, then a's added).
    expect_close(to_doubles(parameters[i]->grad), sum, parameters[i]->value.shape(), {0.0, 0.0},
                 c.name + " stacked " + parameters[i]->name);
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string name = std::string(backend_name(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name;
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Layers, LayerTest,
                         ::testing::Combine(::testing::ValuesIn(all_backends()), ::testing::ValuesIn(layer_cases())),
                         param_name);
INSTANTIATE_TEST_SUITE_P(Layers, LayerAgainstReferenceTest,
                         ::testing::Combine(::testing::Values(Backend::cpu, Backend::cuda),
                                            ::testing::ValuesIn(layer_cases())),
                         param_name);

// ---- behaviour specific to one layer ---------------------------------------------

class LayerBackendTest : public ::testing::TestWithParam<Backend> {};

// Pass 1 (no activations, running statistics updated) and pass 2 (activations,
// no update) of the two-pass trainer compute the same output, and the running
// statistics move once, as PyTorch's: r = 0.9 r + 0.1 stat, unbiased variance.
TEST_P(LayerBackendTest, BatchNormPassesAgreeAndRunningStatsMoveOnce) {
  BT_SKIP_UNLESS_AVAILABLE(GetParam());
  const Backend backend = GetParam();
  BatchNorm2d bn("bn", 3);
  bn.to(backend_device(backend));
  const Tensor x = on_backend(random_tensor({4, 3, 5, 2}, 8, -2.0f, 3.0f), backend);
  ForwardContext pass1{.backend = backend, .training = true, .keep_activations = false, .update_bn_running_stats = true};
  ForwardContext pass2 = pass1;
  pass2.keep_activations = true;
  pass2.update_bn_running_stats = false;
  const std::vector<double> y1 = to_doubles(bn.forward(x, pass1));
  const std::vector<double> mean_after = to_doubles(bn.running_mean().value);
  const std::vector<double> var_after = to_doubles(bn.running_var().value);
  const std::vector<double> y2 = to_doubles(bn.forward(x, pass2));
  EXPECT_EQ(y1, y2) << "pass 2 must recompute pass 1 exactly";
  EXPECT_EQ(to_doubles(bn.running_mean().value), mean_after) << "pass 2 must not move the running statistics";
  EXPECT_EQ(to_doubles(bn.running_var().value), var_after);
  EXPECT_EQ(bn.num_batches_tracked().value, 1);

  const std::vector<double> values = to_doubles(x);
  const std::int64_t count = 4 * 5 * 2;
  std::vector<double> expected_mean(3), expected_var(3);
  for (int c = 0; c < 3; ++c) {
    double sum = 0.0, sum_sq = 0.0;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 10; ++i) {
        const double v = values[(n * 3 + c) * 10 + i];
        sum += v;
        sum_sq += v * v;
      }
    const double mean = sum / count;
    const double unbiased = (sum_sq - count * mean * mean) / (count - 1);
    expected_mean[c] = 0.1 * mean;
    expected_var[c] = 0.9 + 0.1 * unbiased;
  }
  // float32 statistics of 40 values, O(1) in size: a few ulps.
  expect_close(mean_after, expected_mean, {3}, {1e-5, 1e-6}, "running_mean");
  expect_close(var_after, expected_var, {3}, {1e-5, 1e-6}, "running_var");
  bn.backward(from_doubles({4, 3, 5, 2}, random_doubles(120, 4), backend_device(backend)));
}

// Frozen BatchNorm normalises with the running statistics even when training.
TEST_P(LayerBackendTest, FrozenBatchNormUsesRunningStatistics) {
  BT_SKIP_UNLESS_AVAILABLE(GetParam());
  const Backend backend = GetParam();
  BatchNorm2d bn("bn", 2);
  bn.running_mean().value.copy_from(Tensor::from_vector({2}, std::vector<float>{0.5f, -1.0f}));
  bn.running_var().value.copy_from(Tensor::from_vector({2}, std::vector<float>{4.0f, 0.25f}));
  bn.weight().value.copy_from(Tensor::from_vector({2}, std::vector<float>{2.0f, 1.0f}));
  bn.bias().value.copy_from(Tensor::from_vector({2}, std::vector<float>{0.0f, 3.0f}));
  bn.to(backend_device(backend));
  const Tensor x = on_backend(random_tensor({2, 2, 3, 3}, 9), backend);
  ForwardContext ctx{.backend = backend, .training = true, .keep_activations = false, .freeze_bn = true};
  const std::vector<double> y = to_doubles(bn.forward(x, ctx));
  const std::vector<double> xs = to_doubles(x);
  std::vector<double> expected(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const int c = static_cast<int>((i / 9) % 2);
    const double mean = c == 0 ? 0.5 : -1.0, var = c == 0 ? 4.0 : 0.25, gamma = c == 0 ? 2.0 : 1.0,
                 beta = c == 0 ? 0.0 : 3.0;
    expected[i] = gamma * (xs[i] - mean) / std::sqrt(var + 1e-5) + beta;
  }
  expect_close(y, expected, {2, 2, 3, 3}, {1e-6, 1e-6}, "frozen batch norm");  // one multiply-add in float32
  EXPECT_EQ(bn.num_batches_tracked().value, 0);
  EXPECT_EQ(to_doubles(bn.running_mean().value), (std::vector<double>{0.5, -1.0}));
}

// Same seed and offset redraw the same mask (pass 2 = pass 1); another offset or
// another layer name draws another; evaluation is the identity.
TEST_P(LayerBackendTest, DropoutMaskIsReproducible) {
  BT_SKIP_UNLESS_AVAILABLE(GetParam());
  const Backend backend = GetParam();
  Dropout first("aggregator.dropout", 0.5f), second("head.dropout", 0.5f);
  const Tensor x = on_backend(random_tensor({8, 64}, 1, 0.5f, 1.5f), backend);
  ForwardContext ctx{.backend = backend, .training = true, .dropout_seed = 42, .dropout_offset = 1000};
  const std::vector<double> a = to_doubles(first.forward(x, ctx));
  EXPECT_EQ(to_doubles(first.forward(x, ctx)), a);
  EXPECT_NE(to_doubles(second.forward(x, ctx)), a);
  ForwardContext shifted = ctx;
  shifted.dropout_offset += 512;
  EXPECT_NE(to_doubles(first.forward(x, shifted)), a);
  std::size_t zeros = 0;
  const std::vector<double> xs = to_doubles(x);
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == 0.0) ++zeros;
    else EXPECT_FLOAT_EQ(static_cast<float>(a[i]), static_cast<float>(xs[i] * 2.0));
  }
  // 512 draws with p = 0.5: the count of zeros is within +-5 sigma (sigma ~ 11).
  EXPECT_NEAR(static_cast<double>(zeros), 256.0, 57.0);
  EXPECT_EQ(to_doubles(first.forward(x, ForwardContext{.backend = backend})), xs) << "eval must be the identity";
}

// The last tile batch of an image is smaller: the layer builds a second op for the
// new shape, and each sample's output does not depend on the batch it came in.
TEST_P(LayerBackendTest, ConvServesSeveralBatchSizes) {
  BT_SKIP_UNLESS_AVAILABLE(GetParam());
  const Backend backend = GetParam();
  Conv2d conv("c", Conv2dOptions::square(3, 5, 3, 2, 1, true), 3);
  conv.to(backend_device(backend));
  const Tensor x = on_backend(random_tensor({3, 3, 9, 9}, 2), backend);
  const ForwardContext ctx = ForwardContext::inference(backend);
  const std::vector<double> all = to_doubles(conv.forward(x, ctx));
  const std::vector<double> head = to_doubles(conv.forward(x.slice_rows(0, 2), ctx));
  const std::vector<double> tail = to_doubles(conv.forward(x.slice_rows(2, 3), ctx));
  std::vector<double> joined = head;
  joined.insert(joined.end(), tail.begin(), tail.end());
  // oneDNN may pick another blocking for another batch size: same sums, other order.
  expect_close(joined, all, {3, 5, 5, 5}, {2e-6, 1e-7}, "batches 2 + 1 vs 3");
}

// Inference keeps nothing: memory holds one activation at a time.
TEST_P(LayerBackendTest, InferenceKeepsNoActivations) {
  BT_SKIP_UNLESS_AVAILABLE(GetParam());
  const Backend backend = GetParam();
  BasicBlock block("layer1.0", 8, 8, 1, 3);
  block.to(backend_device(backend));
  const Tensor x = on_backend(random_tensor({2, 8, 32, 32}, 2), backend);
  Allocator& allocator = allocator_for(backend_device(backend));
  const Tensor warm = block.forward(x, ForwardContext::inference(backend));
  const std::size_t activation = static_cast<std::size_t>(x.nbytes());
  allocator.reset_peak();
  const std::size_t before = allocator.stats().current_bytes;
  {
    Tensor y = block.forward(x, ForwardContext::inference(backend));
    EXPECT_EQ(block.saved_count(), 0u);
  }
  // At most the block's output and two intermediates alive at once (conv output
  // being normalised, plus the identity kept for the add), plus kernel workspace.
  EXPECT_LE(allocator.stats().peak_bytes - before, 3 * activation + (1u << 20));
  EXPECT_EQ(allocator.stats().current_bytes, before);
}

INSTANTIATE_TEST_SUITE_P(Backends, LayerBackendTest, ::testing::ValuesIn(all_backends()), backend_param_name);

TEST(Layers, RejectBadInputsWithClearErrors) {
  Conv2d conv("layer1.0.conv1", Conv2dOptions::square(3, 4, 3), 1);
  try {
    conv.forward(Tensor::zeros({1, 2, 8, 8}), ForwardContext::inference(Backend::cpu));
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("layer1.0.conv1"), std::string::npos) << error.what();
  }
  EXPECT_THROW(Linear("fc", 4, 2, 1).forward(Tensor::zeros({3, 5}), ForwardContext::inference(Backend::cpu)), Error);
  EXPECT_THROW(Dropout("d", 1.0f), Error);
  BatchNorm2d bn("bn", 2);
  ForwardContext train{.backend = Backend::cpu, .training = true};
  EXPECT_THROW(bn.forward(Tensor::zeros({1, 2, 1, 1}), train), Error);  // variance of one value
}

}  // namespace
}  // namespace bigtrain::net
