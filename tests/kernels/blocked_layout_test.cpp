// oneDNN's activation layouts (Tensor::layout: nChw8c, nChw16c, nhwc): the
// conversions are exact and indexed as oneDNN defines them, hand-indexing such a
// tensor is refused, and every CPU op that reads or writes blocked activations
// (convolution, BatchNorm's four passes, max and global average pooling, the
// element-wise ops) gives what it gives on the plain tensor.
#include <gtest/gtest.h>

#include <vector>

#include "kernels/batch_norm.hpp"
#include "kernels/conv2d.hpp"
#include "kernels/core/error.hpp"
#include "kernels/elementwise.hpp"
#include "kernels/pooling.hpp"
#include "tests/support/op_check.hpp"

namespace bigtrain::kernels {
namespace {

using namespace bigtrain::testing;

std::vector<float> raw_values(const Tensor& t) {
  const float* p = t.data<float>();
  return {p, p + t.numel()};
}

// The channels a test tensor has: whole blocks, and for nhwc (any count) one that
// no vector width divides, so the loops' tails run.
std::int64_t unit_channels(Layout layout) { return layout == Layout::nhwc ? 12 : layout_block(layout); }

// Where oneDNN puts element (n, c, i) of an [N, C, H*W] tensor in `layout`.
std::int64_t onednn_offset(Layout layout, std::int64_t n, std::int64_t c, std::int64_t i, std::int64_t channels,
                           std::int64_t plane) {
  if (layout == Layout::nhwc) return (n * plane + i) * channels + c;
  const std::int64_t block = layout_block(layout);
  return ((n * (channels / block) + c / block) * plane + i) * block + c % block;
}

class BlockedLayout : public ::testing::TestWithParam<Layout> {};

TEST_P(BlockedLayout, ConversionsAreExactAndIndexedAsOneDnnDefines) {
  const Layout layout = GetParam();
  const std::int64_t n = 2, c = 2 * unit_channels(layout), h = 3, w = 5;
  const Tensor plain = random_tensor({n, c, h, w}, 11);
  const Tensor blocked = plain.to_layout(layout);
  ASSERT_EQ(blocked.layout(), layout);
  const float* in = plain.f32();
  const float* out = blocked.data<float>();
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t ch = 0; ch < c; ++ch)
      for (std::int64_t i = 0; i < h * w; ++i)
        ASSERT_EQ(out[onednn_offset(layout, b, ch, i, c, h * w)], in[(b * c + ch) * h * w + i]);
  EXPECT_EQ(raw_values(blocked.to_plain()), raw_values(plain));
  EXPECT_EQ(blocked.to_vector(), plain.to_vector());  // values, in NCHW order
  // Dim-0 slices of a blocked tensor are blocked samples.
  EXPECT_EQ(blocked.slice_rows(1, 2).to_vector(), plain.slice_rows(1, 2).to_vector());
  // A copy takes the values, whatever the layouts.
  Tensor copy = Tensor::empty(plain.shape());
  copy.copy_from(blocked);
  EXPECT_EQ(copy.to_vector(), plain.to_vector());
  EXPECT_EQ(blocked.clone().layout(), layout);
}

TEST_P(BlockedLayout, HandIndexingAndInvalidLayoutsAreRefused) {
  const Layout layout = GetParam();
  const std::int64_t block = unit_channels(layout);
  const Tensor blocked = random_tensor({1, block, 2, 2}, 3).to_layout(layout);
  EXPECT_THROW(blocked.f32(), Error);
  EXPECT_THROW(blocked.reshape({block * 4}), Error);
  Tensor odd = Tensor::empty({1, block + 1, 2, 2});
  if (layout == Layout::nhwc)
    EXPECT_NO_THROW(odd.set_layout(layout)) << "nhwc holds any channel count";
  else
    EXPECT_THROW(odd.set_layout(layout), Error);
  Tensor flat = Tensor::empty({4, block});
  EXPECT_THROW(flat.set_layout(layout), Error) << "activations only";
  Tensor wide = Tensor::empty({2, block, 2, 2});
  Tensor view = wide.slice_rows(0, 1);
  EXPECT_THROW(view.set_layout(layout), Error);  // the storage's other rows would change meaning
  EXPECT_EQ(writable_layout(view, layout), Layout::plain);
  EXPECT_EQ(writable_layout(wide, layout), layout);
}

TEST_P(BlockedLayout, BatchNormPassesEqualThePlainOnes) {
  const Layout layout = GetParam();
  BatchNormSpec spec;
  spec.batch = 3, spec.channels = 2 * unit_channels(layout), spec.height = 5, spec.width = 7;
  auto op = make_batch_norm(Backend::cpu, spec);
  const Tensor x = random_tensor(spec.input_shape(), 1, 0.5f, 2.0f), dy = random_tensor(spec.input_shape(), 2);
  const Tensor gamma = random_tensor({spec.channels}, 3, 0.5f, 1.5f), beta = random_tensor({spec.channels}, 4);
  const Tensor rm = random_tensor({spec.channels}, 5), rv = random_tensor({spec.channels}, 6, 0.5f, 2.0f);
  const Tolerance tight{1e-5, 1e-6};
  struct Outputs {
    Tensor y, mean, invstd, running_mean, running_var, y_inference, dx, dgamma, dbeta, dx_inference, dgamma_i, dbeta_i;
  };
  auto run = [&](Layout in) {
    Outputs o;
    const Tensor xin = x.to_layout(in), dyin = dy.to_layout(in);
    o.y = Tensor::empty(spec.input_shape());
    o.mean = Tensor::empty({spec.channels}), o.invstd = Tensor::empty({spec.channels});
    o.running_mean = rm.clone(), o.running_var = rv.clone();
    op->forward_training(xin, gamma, beta, o.y, o.mean, o.invstd, &o.running_mean, &o.running_var, 0.1f);
    o.y_inference = Tensor::empty(spec.input_shape());
    op->forward_inference(xin, gamma, beta, rm, rv, o.y_inference);
    o.dx = Tensor::empty(spec.input_shape()), o.dgamma = Tensor::empty({spec.channels});
    o.dbeta = Tensor::empty({spec.channels});
    op->backward_training(xin, dyin, gamma, o.mean, o.invstd, o.dx, o.dgamma, o.dbeta, nullptr);
    o.dx_inference = Tensor::empty(spec.input_shape()), o.dgamma_i = Tensor::empty({spec.channels});
    o.dbeta_i = Tensor::empty({spec.channels});
    op->backward_inference(xin, dyin, gamma, rm, rv, o.dx_inference, o.dgamma_i, o.dbeta_i, nullptr);
    return o;
  };
  const Outputs plain = run(Layout::plain), blocked = run(layout);
  EXPECT_EQ(blocked.y.layout(), layout);
  EXPECT_EQ(blocked.dx.layout(), layout);
  expect_close(blocked.y, plain.y, tight, "training y");
  expect_close(blocked.mean, plain.mean, tight, "batch mean");
  expect_close(blocked.invstd, plain.invstd, tight, "batch invstd");
  expect_close(blocked.running_mean, plain.running_mean, tight, "running mean");
  expect_close(blocked.running_var, plain.running_var, tight, "running var");
  EXPECT_EQ(blocked.y_inference.to_vector(), plain.y_inference.to_vector());  // the same a*x+b per element
  expect_close(blocked.dx, plain.dx, tight, "training dx");
  expect_close(blocked.dgamma, plain.dgamma, tight, "training dgamma");
  expect_close(blocked.dbeta, plain.dbeta, tight, "training dbeta");
  EXPECT_EQ(blocked.dx_inference.to_vector(), plain.dx_inference.to_vector());
  expect_close(blocked.dgamma_i, plain.dgamma_i, tight, "frozen dgamma");
  expect_close(blocked.dbeta_i, plain.dbeta_i, tight, "frozen dbeta");
}

TEST_P(BlockedLayout, PoolingEqualsThePlainOne) {
  const Layout layout = GetParam();
  Pool2dSpec spec;
  spec.kind = PoolKind::max, spec.batch = 2, spec.channels = 2 * unit_channels(layout), spec.in_h = 9, spec.in_w = 8;
  spec.kernel_h = spec.kernel_w = 3, spec.stride_h = spec.stride_w = 2, spec.pad_h = spec.pad_w = 1;
  auto op = make_pool2d(Backend::cpu, spec);
  const Tensor x = random_tensor(spec.input_shape(), 7), dy = random_tensor(spec.output_shape(), 8);
  auto run = [&](Layout in) {
    Tensor y = Tensor::empty(spec.output_shape()), dx = Tensor::empty(spec.input_shape());
    const Tensor workspace = op->forward(x.to_layout(in), y, true);
    op->backward(dy.to_layout(in), workspace, dx);
    return std::pair{y, dx};
  };
  const auto [y_plain, dx_plain] = run(Layout::plain);
  const auto [y_blocked, dx_blocked] = run(layout);
  EXPECT_EQ(y_blocked.layout(), layout);
  EXPECT_EQ(y_blocked.to_vector(), y_plain.to_vector());
  // Overlapping windows add into one input position in another order.
  expect_close(dx_blocked, dx_plain, {1e-6, 1e-7}, "max pool dx");

  const Tensor features = random_tensor({2, spec.channels, 5, 6}, 9), dfeatures = random_tensor({2, spec.channels}, 10);
  Tensor pooled_plain = Tensor::empty({2, spec.channels}), pooled_blocked = Tensor::empty({2, spec.channels});
  global_avg_pool_forward(Backend::cpu, features, pooled_plain);
  global_avg_pool_forward(Backend::cpu, features.to_layout(layout), pooled_blocked);
  expect_close(pooled_blocked, pooled_plain, {1e-6, 1e-7}, "global average");
  Tensor grad_plain = Tensor::empty(features.shape()), grad_blocked = Tensor::empty(features.shape());
  grad_blocked.set_layout(layout);  // the gradient is written in the layout asked for
  global_avg_pool_backward(Backend::cpu, dfeatures, grad_plain);
  global_avg_pool_backward(Backend::cpu, dfeatures, grad_blocked);
  EXPECT_EQ(grad_blocked.layout(), layout);
  EXPECT_EQ(grad_blocked.to_vector(), grad_plain.to_vector());
}

TEST_P(BlockedLayout, ElementwiseOpsAlignMixedLayouts) {
  const Layout layout = GetParam();
  const Shape shape{2, unit_channels(layout), 3, 3};
  const Tensor a = random_tensor(shape, 1), b = random_tensor(shape, 2);
  Tensor sum_plain = Tensor::empty(shape), sum_mixed = Tensor::empty(shape);
  add(Backend::cpu, a, b, sum_plain);
  add(Backend::cpu, a.to_layout(layout), b, sum_mixed);  // b is brought to a's layout
  EXPECT_EQ(sum_mixed.layout(), layout);
  EXPECT_EQ(sum_mixed.to_vector(), sum_plain.to_vector());
  Tensor grad_plain = Tensor::empty(shape), grad_mixed = Tensor::empty(shape);
  relu_backward(Backend::cpu, a, b, grad_plain);
  relu_backward(Backend::cpu, a.to_layout(layout), b, grad_mixed);
  EXPECT_EQ(grad_mixed.to_vector(), grad_plain.to_vector());
  Tensor accumulated = b.to_layout(layout).clone();
  axpy(Backend::cpu, 2.0f, a, accumulated);  // a plain, added into a blocked accumulator
  Tensor expected = b.clone();
  axpy(Backend::cpu, 2.0f, a, expected);
  EXPECT_EQ(accumulated.to_vector(), expected.to_vector());
}

TEST_P(BlockedLayout, ConvolutionWithBlockedOutputsComputesTheSameValues) {
  const Layout layout = GetParam();
  Conv2dSpec spec;
  spec.batch = 2, spec.in_channels = 2 * unit_channels(layout), spec.out_channels = 2 * unit_channels(layout);
  spec.in_h = 9, spec.in_w = 10, spec.kernel_h = spec.kernel_w = 3, spec.pad_h = spec.pad_w = 1;
  Conv2dSpec blocked_spec = spec;
  blocked_spec.blocked_outputs = true;
  auto plain_op = make_conv2d(Backend::cpu, spec), blocked_op = make_conv2d(Backend::cpu, blocked_spec);
  const Tensor x = random_tensor(spec.input_shape(), 1), w = random_tensor(spec.weight_shape(), 2);
  const Tensor dy = random_tensor(spec.output_shape(), 3);
  Tensor y_plain = Tensor::empty(spec.output_shape()), y_blocked = Tensor::empty(spec.output_shape());
  plain_op->forward(x, w, nullptr, y_plain);
  blocked_op->forward(x.to_layout(layout), w, nullptr, y_blocked);
  EXPECT_EQ(y_plain.layout(), Layout::plain);  // op-level callers see NCHW unless they ask
  EXPECT_EQ(y_blocked.to_vector(), y_plain.to_vector());
  Tensor dx_plain = Tensor::empty(spec.input_shape()), dx_blocked = Tensor::empty(spec.input_shape());
  plain_op->backward_data(dy, w, dx_plain);
  blocked_op->backward_data(dy.to_layout(layout), w, dx_blocked);
  EXPECT_EQ(dx_blocked.to_vector(), dx_plain.to_vector());
  Tensor dw_plain = Tensor::empty(spec.weight_shape()), dw_blocked = Tensor::empty(spec.weight_shape());
  plain_op->backward_weights(x, dy, dw_plain, nullptr);
  blocked_op->backward_weights(x.to_layout(layout), dy.to_layout(layout), dw_blocked, nullptr);
  EXPECT_EQ(dw_blocked.layout(), Layout::plain);
  EXPECT_EQ(dw_blocked.to_vector(), dw_plain.to_vector());
}

INSTANTIATE_TEST_SUITE_P(Layouts, BlockedLayout, ::testing::Values(Layout::blocked8, Layout::blocked16, Layout::nhwc),
                         [](const ::testing::TestParamInfo<Layout>& info) {
                           return std::string(layout_name(info.param));
                         });

// nhwc and nChw16c convert into each other exactly (through NCHW), and BatchNorm's
// nhwc loops, which run over pixels rather than over groups of 16 channels, sum in
// the blocked loops' order: the same bits in every pass, with the ReLU and the
// residual fused or not, and on a plane longer than one 1024-value chunk.
TEST(NhwcLayout, BatchNormHasTheBlockedLoopsBits) {
  for (const bool relu : {false, true}) {
    for (const bool residual : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "relu " << relu << " residual " << residual);
      BatchNormSpec spec;
      spec.batch = 2, spec.channels = 48, spec.height = 33, spec.width = 35, spec.relu = relu;
      spec.residual = residual;
      auto op = make_batch_norm(Backend::cpu, spec);
      const Tensor x = random_tensor(spec.input_shape(), 1, -1.0f, 3.0f), dy = random_tensor(spec.input_shape(), 2);
      const Tensor shortcut = random_tensor(spec.input_shape(), 7);
      const Tensor gamma = random_tensor({spec.channels}, 3, 0.5f, 1.5f), beta = random_tensor({spec.channels}, 4);
      const Tensor rm = random_tensor({spec.channels}, 5), rv = random_tensor({spec.channels}, 6, 0.5f, 2.0f);
      auto run = [&](Layout layout) {
        std::vector<Tensor> out;
        const Tensor xin = x.to_layout(layout), dyin = dy.to_layout(layout), rin = shortcut.to_layout(layout);
        const Tensor* res = residual ? &rin : nullptr;
        Tensor y = Tensor::empty(spec.input_shape()), mean = Tensor::empty({spec.channels});
        Tensor invstd = Tensor::empty({spec.channels}), run_mean = rm.clone(), run_var = rv.clone();
        op->forward_training(xin, gamma, beta, y, mean, invstd, &run_mean, &run_var, 0.1f, res);
        Tensor y_frozen = Tensor::empty(spec.input_shape());
        op->forward_inference(xin, gamma, beta, rm, rv, y_frozen, res);
        const Tensor* mask = spec.backward_masks_relu() ? &y : nullptr;
        Tensor dx = Tensor::empty(spec.input_shape()), dgamma = Tensor::empty({spec.channels});
        Tensor dbeta = Tensor::empty({spec.channels});
        op->backward_training(xin, dyin, gamma, mean, invstd, dx, dgamma, dbeta, mask);
        Tensor dx_frozen = Tensor::empty(spec.input_shape()), dgamma_frozen = Tensor::empty({spec.channels});
        Tensor dbeta_frozen = Tensor::empty({spec.channels});
        op->backward_inference(xin, dyin, gamma, rm, rv, dx_frozen, dgamma_frozen, dbeta_frozen, mask);
        EXPECT_EQ(y.layout(), layout);
        EXPECT_EQ(dx.layout(), layout);
        for (const Tensor& t : {y, mean, invstd, run_mean, run_var, y_frozen, dx, dgamma, dbeta, dx_frozen,
                                dgamma_frozen, dbeta_frozen})
          out.push_back(t.to_plain());
        return out;
      };
      const std::vector<Tensor> nhwc = run(Layout::nhwc), blocked = run(Layout::blocked16);
      const char* names[] = {"y", "mean", "invstd", "running mean", "running var", "frozen y",
                             "dx", "dgamma", "dbeta", "frozen dx", "frozen dgamma", "frozen dbeta"};
      for (std::size_t i = 0; i < nhwc.size(); ++i) EXPECT_EQ(nhwc[i].to_vector(), blocked[i].to_vector()) << names[i];
    }
  }
}

TEST(NhwcLayout, ConvertsToAndFromTheBlockedLayoutsExactly) {
  const Tensor plain = random_tensor({2, 32, 3, 5}, 21);
  for (const Layout blocked : {Layout::blocked8, Layout::blocked16}) {
    const Tensor nhwc = plain.to_layout(Layout::nhwc).to_layout(blocked);
    EXPECT_EQ(nhwc.layout(), blocked);
    EXPECT_EQ(nhwc.to_vector(), plain.to_vector());
    const Tensor back = plain.to_layout(blocked).to_layout(Layout::nhwc);
    EXPECT_EQ(back.layout(), Layout::nhwc);
    EXPECT_EQ(raw_values(back), raw_values(plain.to_layout(Layout::nhwc)));
  }
}

}  // namespace
}  // namespace bigtrain::kernels
