#include "net/residual_block.hpp"

#include <algorithm>
#include <initializer_list>

#include "kernels/core/error.hpp"
#include "kernels/elementwise.hpp"
#include "net/batch_norm.hpp"
#include "net/conv_bn_fusion.hpp"
#include "net/memory_plan.hpp"

namespace bigtrain::net {

void ResidualBlock::make_downsample(std::int64_t in_channels, std::int64_t out_channels, int stride,
                                    InitSeed seed, const NormChoice& norm) {
  out_channels_ = out_channels;
  if (stride == 1 && in_channels == out_channels) return;
  downsample_conv_ = std::make_unique<Conv2d>(child_name(*this, "downsample.0"),
                                              Conv2dOptions::square(in_channels, out_channels, 1, stride), seed, ConvInit::kaiming_normal_fan_out);
  downsample_bn_ = make_norm(norm, child_name(*this, "downsample.1"), out_channels);
}

// The block's end (last convolution, BatchNorm, shortcut add, ReLU) is one op only if
// its last pair fuses; otherwise the block runs layer by layer.
bool ResidualBlock::fuses_end(const ForwardContext& ctx) const {
  const std::vector<const Layer*> main = main_layers();
  return fuses_conv_bn(ctx) && main.size() >= 2 && fuses_pair(main[main.size() - 2], main.back(), ctx);
}

Tensor ResidualBlock::forward(const Tensor& x, const ForwardContext& ctx) {
  if (fuses_end(ctx)) return fused_forward(x, ctx);
  Tensor h = main_forward_before_last_norm(x, ctx);
  Tensor identity = x;
  if (downsample_conv_) {
    identity = downsample_conv_->forward(x, ctx);
    identity = downsample_bn_->forward(identity, ctx);
  }
  // The last normalisation, the add and the ReLU: one pass over memory where the
  // normalisation can (BatchNorm), instead of three.
  Tensor y = last_bn().forward_add_relu(h, identity, relu_out_, ctx);
  if (ctx.keep_activations) saved_backends_.push_back(ctx.backend);
  return y;
}

// The shortcut runs first, so that the main branch's last convolution can add it
// and apply the output ReLU in its epilogue; inference then holds the shortcut
// during the main branch (one more activation, only in downsampling blocks).
Tensor ResidualBlock::fused_forward(const Tensor& x, const ForwardContext& ctx) {
  const Tensor identity =
      downsample_conv_ ? forward_fusing_conv_bn({downsample_conv_.get(), downsample_bn_.get()}, x, ctx) : x;
  std::vector<Layer*> main;
  // The block owns these layers; main_layers() is const for the planner's sake.
  for (const Layer* layer : main_layers()) main.push_back(const_cast<Layer*>(layer));
  Tensor y = forward_fusing_conv_bn(main, x, ctx, &identity);
  if (ctx.keep_activations) {
    relu_out_.keep_fused_output(y, ctx);
    saved_backends_.push_back(ctx.backend);
  }
  return y;
}

Tensor ResidualBlock::backward(const Tensor& dy) {
  BT_CHECK(!saved_backends_.empty(), "block `{}`: backward without a kept forward", name());
  const Backend backend = saved_backends_.back();
  saved_backends_.pop_back();
  Tensor d_sum = relu_out_.backward(dy);
  Tensor dx = main_backward(d_sum);
  Tensor d_identity = d_sum;
  if (downsample_conv_) d_identity = downsample_conv_->backward(downsample_bn_->backward(d_sum));
  kernels::add(backend, dx, d_identity, dx);
  return dx;
}

LayerFootprint ResidualBlock::describe(const Shape& input, const PlanContext& ctx) const {
  return describe_by_walking(*this, input, ctx);
}

PlannedTensor ResidualBlock::plan_forward(MemoryWalk& walk, const PlannedTensor& x) const {
  if (fuses_end(walk.context().forward)) {
    // As fused_forward: the shortcut first, held while the main branch runs.
    if (!walk.context().forward.keep_activations) {
      const PlannedTensor identity = downsample_conv_ ? walk.forward(*downsample_conv_, x) : x;
      return plan_fusing_conv_bn(walk, main_layers(), x, /*residual=*/true);
    }
    // Kept: the last op's output is the sum, whose gradient backward hands to both
    // branches, and the block's ReLU keeps it.
    const PlannedTensor identity =
        downsample_conv_ ? plan_fusing_conv_bn(walk, {downsample_conv_.get(), downsample_bn_.get()}, x) : x;
    const PlannedTensor out = plan_fusing_conv_bn(walk, main_layers(), x, /*residual=*/true);
    const PlannedTensor sum = walk.add_in_place(out, identity);
    PlannedTensor y = walk.forward(relu_out_, sum, /*row=*/false);
    walk.row(name(), "add+relu", y);
    return y;
  }
  // As forward: the main branch to the last normalisation's input, the shortcut,
  // then the normalisation, add and ReLU. The block's ReLUs have no rows: its
  // "add+relu" row stands for them.
  const std::vector<const Layer*> main = main_layers();
  PlannedTensor out = x;
  for (auto layer = main.begin(); layer + 1 != main.end(); ++layer)
    out = walk.forward(**layer, out, dynamic_cast<const ReLU*>(*layer) == nullptr);
  PlannedTensor identity = x;
  if (downsample_conv_) {
    identity = walk.forward(*downsample_conv_, x);
    identity = walk.forward(*downsample_bn_, identity);
  }
  out = walk.forward(*main.back(), out);
  const PlannedTensor sum = walk.add_in_place(out, identity);
  out = {}, identity = {};
  PlannedTensor y = walk.forward(relu_out_, sum, /*row=*/false);
  walk.row(name(), "add+relu", y);
  return y;
}

ReceptiveField ResidualBlock::receptive_field(const ForwardContext& ctx) const {
  ReceptiveField main = ReceptiveField::identity();
  for (const Layer* layer : main_layers()) main = main.then(layer->receptive_field(ctx));
  ReceptiveField shortcut = ReceptiveField::identity();
  if (downsample_conv_)
    shortcut = downsample_conv_->receptive_field(ctx).then(downsample_bn_->receptive_field(ctx));
  BT_CHECK(main.y.stride == shortcut.y.stride && main.x.stride == shortcut.x.stride,
           "block `{}`: the main branch (stride {}x{}) and the shortcut (stride {}x{}) do not share one output grid",
           name(), main.y.stride, main.x.stride, shortcut.y.stride, shortcut.x.stride);
  const auto either = [](const AxisField& a, const AxisField& b) {
    return AxisField{a.stride, std::max(a.before, b.before), std::max(a.after, b.after)};
  };
  return {either(main.y, shortcut.y), either(main.x, shortcut.x)};
}

void ResidualBlock::collect_state(StateRefs& refs) {
  collect_main_state(refs);
  if (downsample_conv_) {
    downsample_conv_->collect_state(refs);
    downsample_bn_->collect_state(refs);
  }
}

void ResidualBlock::clear_saved() {
  clear_main_saved();
  if (downsample_conv_) {
    downsample_conv_->clear_saved();
    downsample_bn_->clear_saved();
  }
  relu_out_.clear_saved();
  saved_backends_.clear();
}

std::size_t ResidualBlock::saved_count() const {
  std::size_t count = main_saved_count() + relu_out_.saved_count() + saved_backends_.size();
  if (downsample_conv_) count += downsample_conv_->saved_count() + downsample_bn_->saved_count();
  return count;
}

// ---- BasicBlock ------------------------------------------------------------------

BasicBlock::BasicBlock(std::string name, std::int64_t in_channels, std::int64_t planes, int stride,
                       InitSeed seed, const NormChoice& norm)
    : ResidualBlock(std::move(name)) {
  conv1_ = std::make_unique<Conv2d>(child_name(*this, "conv1"), Conv2dOptions::square(in_channels, planes, 3, stride, 1),
                                    seed, ConvInit::kaiming_normal_fan_out);
  bn1_ = make_norm(norm, child_name(*this, "bn1"), planes);
  conv2_ = std::make_unique<Conv2d>(child_name(*this, "conv2"), Conv2dOptions::square(planes, planes, 3, 1, 1), seed, ConvInit::kaiming_normal_fan_out);
  bn2_ = make_norm(norm, child_name(*this, "bn2"), planes);
  make_downsample(in_channels, planes * kExpansion, stride, seed, norm);
}

// One statement per layer: each intermediate is released as soon as the next
// layer has consumed it (a nested call would keep every temporary of the
// expression alive to its end), so inference holds two activations at a time.
Tensor BasicBlock::main_forward_before_last_norm(const Tensor& x, const ForwardContext& ctx) {
  Tensor h = conv1_->forward(x, ctx);
  h = bn1_->forward_with_relu(h, relu1_, ctx);
  return conv2_->forward(h, ctx);
}

Tensor BasicBlock::main_backward(const Tensor& dy) {
  Tensor d = conv2_->backward(bn2_->backward(dy));
  return conv1_->backward(bn1_->backward_with_relu(d, relu1_));
}

std::vector<const Layer*> BasicBlock::main_layers() const {
  return {conv1_.get(), bn1_.get(), &relu1_, conv2_.get(), bn2_.get()};
}

void BasicBlock::collect_main_state(StateRefs& refs) {
  conv1_->collect_state(refs);
  bn1_->collect_state(refs);
  conv2_->collect_state(refs);
  bn2_->collect_state(refs);
}

void BasicBlock::clear_main_saved() {
  conv1_->clear_saved();
  bn1_->clear_saved();
  relu1_.clear_saved();
  conv2_->clear_saved();
  bn2_->clear_saved();
}

std::size_t BasicBlock::main_saved_count() const {
  return conv1_->saved_count() + bn1_->saved_count() + relu1_.saved_count() + conv2_->saved_count() +
         bn2_->saved_count();
}

// ---- Bottleneck ------------------------------------------------------------------

Bottleneck::Bottleneck(std::string name, std::int64_t in_channels, std::int64_t planes, int stride,
                       InitSeed seed, const NormChoice& norm)
    : ResidualBlock(std::move(name)) {
  conv1_ = std::make_unique<Conv2d>(child_name(*this, "conv1"), Conv2dOptions::square(in_channels, planes, 1), seed, ConvInit::kaiming_normal_fan_out);
  bn1_ = make_norm(norm, child_name(*this, "bn1"), planes);
  conv2_ = std::make_unique<Conv2d>(child_name(*this, "conv2"), Conv2dOptions::square(planes, planes, 3, stride, 1),
                                    seed, ConvInit::kaiming_normal_fan_out);
  bn2_ = make_norm(norm, child_name(*this, "bn2"), planes);
  conv3_ = std::make_unique<Conv2d>(child_name(*this, "conv3"), Conv2dOptions::square(planes, planes * kExpansion, 1),
                                    seed, ConvInit::kaiming_normal_fan_out);
  bn3_ = make_norm(norm, child_name(*this, "bn3"), planes * kExpansion);
  make_downsample(in_channels, planes * kExpansion, stride, seed, norm);
}

Tensor Bottleneck::main_forward_before_last_norm(const Tensor& x, const ForwardContext& ctx) {
  Tensor h = conv1_->forward(x, ctx);
  h = bn1_->forward_with_relu(h, relu1_, ctx);
  h = conv2_->forward(h, ctx);
  h = bn2_->forward_with_relu(h, relu2_, ctx);
  return conv3_->forward(h, ctx);
}

Tensor Bottleneck::main_backward(const Tensor& dy) {
  Tensor d = conv3_->backward(bn3_->backward(dy));
  d = conv2_->backward(bn2_->backward_with_relu(d, relu2_));
  return conv1_->backward(bn1_->backward_with_relu(d, relu1_));
}

std::vector<const Layer*> Bottleneck::main_layers() const {
  return {conv1_.get(), bn1_.get(), &relu1_, conv2_.get(), bn2_.get(), &relu2_, conv3_.get(), bn3_.get()};
}

void Bottleneck::collect_main_state(StateRefs& refs) {
  for (Layer* layer : std::initializer_list<Layer*>{conv1_.get(), bn1_.get(), conv2_.get(), bn2_.get(), conv3_.get(),
                                                    bn3_.get()})
    layer->collect_state(refs);
}

void Bottleneck::clear_main_saved() {
  for (Layer* layer : std::initializer_list<Layer*>{conv1_.get(), bn1_.get(), &relu1_, conv2_.get(), bn2_.get(),
                                                    &relu2_, conv3_.get(), bn3_.get()})
    layer->clear_saved();
}

std::size_t Bottleneck::main_saved_count() const {
  return conv1_->saved_count() + bn1_->saved_count() + relu1_.saved_count() + conv2_->saved_count() +
         bn2_->saved_count() + relu2_.saved_count() + conv3_->saved_count() + bn3_->saved_count();
}

}  // namespace bigtrain::net
