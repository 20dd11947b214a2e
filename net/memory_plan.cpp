#include "net/memory_plan.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "kernels/core/allocator.hpp"
#include "kernels/core/error.hpp"
#include "kernels/pooling.hpp"

namespace bigtrain::net {

// ---- trace ----------------------------------------------------------------------

KernelMemoryModel KernelMemoryModel::for_backend(Backend backend) {
  KernelMemoryModel model;
  model.backend = backend;
#if defined(__x86_64__) || defined(__i386__)
  // oneDNN's AVX-512 kernels block channels by 16, its AVX2 ones by 8.
  if (__builtin_cpu_supports("avx512f")) model.cpu_channel_block = 16;
#endif
  return model;
}

std::shared_ptr<MemoryTrace::Block> MemoryTrace::allocate(std::size_t bytes) {
  const std::size_t rounded = CachingAllocator::rounded_size(bytes);
  current_ += rounded;
  if (current_ > peak_) {
    peak_ = current_;
    peak_phase_ = phase_;
  }
  return std::make_shared<Block>(this, rounded);
}

void MemoryTrace::release(std::size_t rounded) { current_ -= rounded; }

void MemoryTrace::reset_peak() {
  peak_ = current_;
  peak_phase_ = phase_;
}

SimTensor SimTensor::allocate(MemoryTrace& trace, Shape shape, DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  SimTensor tensor{std::move(shape), trace.allocate(bytes)};
  return tensor;
}

SimTensor SimTensor::allocate_bytes(MemoryTrace& trace, std::size_t bytes) {
  return {{static_cast<std::int64_t>(bytes)}, trace.allocate(bytes)};
}

namespace {

std::size_t rounded_f32(const Shape& shape) {
  return CachingAllocator::rounded_size(static_cast<std::size_t>(shape_numel(shape)) * sizeof(float));
}

std::int64_t round_up(std::int64_t value, std::int64_t multiple) { return (value + multiple - 1) / multiple * multiple; }

// Allocates every temporary of one kernel call at once and frees them together
// when it goes out of scope, as the kernels' per-call Tensors do.
struct CallTemporaries {
  std::vector<SimTensor> held;
  CallTemporaries(MemoryTrace& trace, const std::vector<std::size_t>& bytes) {
    for (std::size_t b : bytes)
      if (b > 0) held.push_back(SimTensor::allocate_bytes(trace, b));
  }
};

// Appends a table row and counts, as kept, the blocks that no earlier row counted.
class TableRow {
 public:
  TableRow(SimContext& ctx, std::string name, std::string kind) : ctx_(ctx) {
    if (!ctx.table) return;
    row_.name = std::move(name);
    row_.kind = std::move(kind);
  }
  LayerPlan& row() { return row_; }
  void output(const SimTensor& y) {
    row_.output = y.shape;
    row_.output_bytes = y.bytes();
  }
  void kept(const SimTensor& t) {
    if (ctx_.table && ctx_.keep_activations && t.defined() && ctx_.kept_blocks.insert(t.block.get()).second)
      row_.kept_bytes += t.bytes();
  }
  ~TableRow() {
    if (ctx_.table) ctx_.table->push_back(std::move(row_));
  }

 private:
  SimContext& ctx_;
  LayerPlan row_;
};

// ---- layers ---------------------------------------------------------------------

// A parameter's fresh gradient: a temporary added into the existing gradient
// (steady state), or kept as the gradient on the first backward of a run.
class GradSink {
 public:
  void accumulate(SimTensor g, const SimContext& ctx) {
    if (ctx.gradients_exist) return;  // g dies here after axpy into the existing gradient
    if (!grad_.defined()) grad_ = std::move(g);
  }

 private:
  SimTensor grad_;
};

class SimConv final : public SimLayer {
 public:
  SimConv(std::string name, std::int64_t in, std::int64_t out, int kernel, int stride, int pad, bool input_grad = true)
      : name_(std::move(name)), in_(in), out_(out), kernel_(kernel), stride_(stride), pad_(pad),
        input_grad_(input_grad) {}

  SimTensor forward(const SimTensor& x, SimContext& ctx) override {
    const kernels::Conv2dSpec spec = spec_for(x);
    // Compared before dividing: out_h()'s integer division truncates a negative
    // numerator to 0, which would make a too-small input look like one row.
    BT_CHECK(spec.in_h + 2 * pad_ >= kernel_ && spec.in_w + 2 * pad_ >= kernel_,
             "conv `{}`: input {} is smaller than the {}x{} kernel", name_, shape_str(x.shape), kernel_, kernel_);
    TableRow row(ctx, name_, fmt::format("conv {}x{}/{}", kernel_, kernel_, stride_));
    ctx.trace->set_phase("forward " + name_);
    SimTensor y = SimTensor::allocate(*ctx.trace, spec.output_shape());
    { CallTemporaries temps(*ctx.trace, forward_temporaries(spec, *ctx.kernels)); }
    if (ctx.keep_activations) saved_.push_back({spec, x});
    row.output(y);
    row.kept(x);
    row.row().parameters = shape_numel(spec.weight_shape());
    row.row().parameter_bytes = rounded_f32(spec.weight_shape());
    row.row().forward_flops = flops(spec);
    row.row().backward_flops = flops(spec) * (input_grad_ ? 2.0 : 1.0);
    return y;
  }

  SimTensor backward(const SimTensor& dy, SimContext& ctx) override {
    BT_CHECK(!saved_.empty(), "conv `{}`: simulated backward without a kept forward", name_);
    Saved saved = std::move(saved_.back());
    saved_.pop_back();
    ctx.trace->set_phase("backward " + name_);
    const kernels::Conv2dSpec& spec = saved.spec;
    SimTensor dx;
    if (input_grad_) {
      dx = SimTensor::allocate(*ctx.trace, spec.input_shape());
      CallTemporaries temps(*ctx.trace, backward_data_temporaries(spec, *ctx.kernels));
    }
    SimTensor dweight = SimTensor::allocate(*ctx.trace, spec.weight_shape());
    { CallTemporaries temps(*ctx.trace, backward_weights_temporaries(spec, *ctx.kernels)); }
    grad_.accumulate(std::move(dweight), ctx);
    (void)dy;
    return dx;
  }

  void parameter_shapes(std::vector<Shape>& parameters, std::vector<Shape>&) const override {
    parameters.push_back({out_, in_, kernel_, kernel_});
  }

 private:
  kernels::Conv2dSpec spec_for(const SimTensor& x) const {
    BT_CHECK(x.shape.size() == 4 && x.dim(1) == in_, "conv `{}` expects [N,{},H,W], got {}", name_, in_,
             shape_str(x.shape));
    kernels::Conv2dSpec spec;
    spec.batch = x.dim(0);
    spec.in_channels = in_;
    spec.out_channels = out_;
    spec.in_h = x.dim(2);
    spec.in_w = x.dim(3);
    spec.kernel_h = spec.kernel_w = kernel_;
    spec.stride_h = spec.stride_w = stride_;
    spec.pad_h = spec.pad_w = pad_;
    return spec;
  }

  static double flops(const kernels::Conv2dSpec& s) {
    return 2.0 * static_cast<double>(s.batch * s.out_channels * s.out_h() * s.out_w()) *
           static_cast<double>(s.in_channels / s.groups * s.kernel_h * s.kernel_w);
  }

  // kernels/cpu/conv2d.cpp: a grayscale or RGB input (fewer than 8 channels) runs
  // in NHWC, which for one channel is the NCHW tensor itself; wider ones in oneDNN's
  // blocked layout. Each tensor whose layout differs is reordered into a temporary
  // of its (channel-padded) size; weights always are.
  struct CpuLayouts {
    std::size_t src = 0, weights = 0, dst = 0;
  };
  static CpuLayouts cpu_layouts(const kernels::Conv2dSpec& s, const KernelMemoryModel& model, bool backward_data) {
    const std::int64_t block = model.cpu_channel_block;
    const bool narrow = s.groups == 1 && s.in_channels < 8 && !backward_data;
    auto activation = [&](std::int64_t channels, std::int64_t h, std::int64_t w) {
      return static_cast<std::size_t>(s.batch * round_up(channels, block) * h * w) * sizeof(float);
    };
    CpuLayouts layouts;
    if (narrow) {
      layouts.src = s.in_channels == 1 ? 0 : static_cast<std::size_t>(shape_numel(s.input_shape())) * sizeof(float);
      layouts.dst = static_cast<std::size_t>(shape_numel(s.output_shape())) * sizeof(float);
      layouts.weights = static_cast<std::size_t>(round_up(s.out_channels, block) * s.in_channels * s.kernel_h *
                                                 s.kernel_w) * sizeof(float);
    } else {
      layouts.src = activation(s.in_channels, s.in_h, s.in_w);
      layouts.dst = activation(s.out_channels, s.out_h(), s.out_w());
      layouts.weights = static_cast<std::size_t>(round_up(s.out_channels, block) * round_up(s.in_channels, block) *
                                                 s.kernel_h * s.kernel_w) * sizeof(float);
    }
    return layouts;
  }

  static std::vector<std::size_t> forward_temporaries(const kernels::Conv2dSpec& s, const KernelMemoryModel& m) {
    if (m.backend == Backend::cuda) return {};  // the shared cuDNN workspace, counted once by the caller
    if (m.backend == Backend::reference) return {};
    const CpuLayouts l = cpu_layouts(s, m, false);
    return {l.src, l.weights, l.dst};
  }
  static std::vector<std::size_t> backward_data_temporaries(const kernels::Conv2dSpec& s,
                                                            const KernelMemoryModel& m) {
    if (m.backend != Backend::cpu) return {};
    const CpuLayouts l = cpu_layouts(s, m, true);
    return {l.dst, l.weights, l.src};  // diff_dst in, weights in, diff_src out
  }
  static std::vector<std::size_t> backward_weights_temporaries(const kernels::Conv2dSpec& s,
                                                               const KernelMemoryModel& m) {
    if (m.backend != Backend::cpu) return {};
    const CpuLayouts l = cpu_layouts(s, m, false);
    return {l.src, l.dst, l.weights};  // src in, diff_dst in, diff_weights out
  }

  struct Saved {
    kernels::Conv2dSpec spec;
    SimTensor x;
  };
  std::string name_;
  std::int64_t in_, out_;
  int kernel_, stride_, pad_;
  bool input_grad_;
  std::vector<Saved> saved_;
  GradSink grad_;
};

class SimBatchNorm final : public SimLayer {
 public:
  SimBatchNorm(std::string name, std::int64_t channels) : name_(std::move(name)), channels_(channels) {}

  SimTensor forward(const SimTensor& x, SimContext& ctx) override {
    TableRow row(ctx, name_, "batchnorm");
    ctx.trace->set_phase("forward " + name_);
    SimTensor y = SimTensor::allocate(*ctx.trace, x.shape);
    const bool batch_statistics = ctx.training && !ctx.freeze_bn;
    // net/batch_norm.cpp refuses it too (PyTorch raises): the variance is undefined.
    BT_CHECK(!batch_statistics || x.dim(0) * x.dim(2) * x.dim(3) > 1,
             "batch norm `{}`: training needs more than one value per channel, got input {}", name_,
             shape_str(x.shape));
    Saved saved{x, {}, {}, batch_statistics};
    if (batch_statistics) {
      saved.mean = SimTensor::allocate(*ctx.trace, {channels_});
      saved.invstd = SimTensor::allocate(*ctx.trace, {channels_});
      // kernels/cpu/batch_norm.cpp: oneDNN's variance, converted to invstd on the host.
      if (ctx.kernels->backend == Backend::cpu) SimTensor variance = SimTensor::allocate(*ctx.trace, {channels_});
    }
    if (ctx.keep_activations) saved_.push_back(saved);
    row.output(y);
    row.kept(x);
    row.kept(saved.mean);
    row.kept(saved.invstd);
    row.row().parameters = 2 * channels_;
    row.row().parameter_bytes = 2 * rounded_f32({channels_});
    row.row().buffer_bytes = 2 * rounded_f32({channels_});
    return y;
  }

  SimTensor backward(const SimTensor& dy, SimContext& ctx) override {
    BT_CHECK(!saved_.empty(), "batch norm `{}`: simulated backward without a kept forward", name_);
    Saved saved = std::move(saved_.back());
    saved_.pop_back();
    ctx.trace->set_phase("backward " + name_);
    SimTensor dx = SimTensor::allocate(*ctx.trace, dy.shape);
    SimTensor dgamma = SimTensor::allocate(*ctx.trace, {channels_});
    SimTensor dbeta = SimTensor::allocate(*ctx.trace, {channels_});
    if (saved.batch_statistics && ctx.kernels->backend == Backend::cpu)
      SimTensor variance = SimTensor::allocate(*ctx.trace, {channels_});
    gamma_grad_.accumulate(std::move(dgamma), ctx);
    beta_grad_.accumulate(std::move(dbeta), ctx);
    return dx;
  }

  void parameter_shapes(std::vector<Shape>& parameters, std::vector<Shape>& buffers) const override {
    parameters.push_back({channels_});
    parameters.push_back({channels_});
    buffers.push_back({channels_});
    buffers.push_back({channels_});
  }

 private:
  struct Saved {
    SimTensor x, mean, invstd;
    bool batch_statistics;
  };
  std::string name_;
  std::int64_t channels_;
  std::vector<Saved> saved_;
  GradSink gamma_grad_, beta_grad_;
};

// In place, as every ReLU of net::Encoder: keeps its output, which is its input.
class SimReLU final : public SimLayer {
 public:
  explicit SimReLU(std::string name, bool table_row = true) : name_(std::move(name)), table_row_(table_row) {}

  SimTensor forward(const SimTensor& x, SimContext& ctx) override {
    if (ctx.keep_activations) saved_.push_back(x);
    if (table_row_) {
      TableRow row(ctx, name_, "relu");
      row.output(x);
      row.kept(x);
    }
    return x;
  }

  SimTensor backward(const SimTensor& dy, SimContext& ctx) override {
    BT_CHECK(!saved_.empty(), "relu `{}`: simulated backward without a kept forward", name_);
    SimTensor saved = std::move(saved_.back());
    saved_.pop_back();
    ctx.trace->set_phase("backward " + name_);
    return SimTensor::allocate(*ctx.trace, dy.shape);
  }

  void parameter_shapes(std::vector<Shape>&, std::vector<Shape>&) const override {}

 private:
  std::string name_;
  bool table_row_;
  std::vector<SimTensor> saved_;
};

class SimMaxPool final : public SimLayer {
 public:
  SimMaxPool(std::string name, int kernel, int stride, int pad)
      : name_(std::move(name)), kernel_(kernel), stride_(stride), pad_(pad) {}

  SimTensor forward(const SimTensor& x, SimContext& ctx) override {
    kernels::Pool2dSpec spec;
    spec.batch = x.dim(0), spec.channels = x.dim(1), spec.in_h = x.dim(2), spec.in_w = x.dim(3);
    spec.kernel_h = spec.kernel_w = kernel_;
    spec.stride_h = spec.stride_w = stride_;
    spec.pad_h = spec.pad_w = pad_;
    BT_CHECK(spec.in_h + 2 * pad_ >= kernel_ && spec.in_w + 2 * pad_ >= kernel_,
             "pooling `{}`: input {} is smaller than the {}x{} window", name_, shape_str(x.shape), kernel_, kernel_);
    TableRow row(ctx, name_, fmt::format("maxpool {}x{}/{}", kernel_, kernel_, stride_));
    ctx.trace->set_phase("forward " + name_);
    SimTensor y = SimTensor::allocate(*ctx.trace, spec.output_shape());
    SimTensor workspace;
    if (ctx.kernels->backend == Backend::cpu) {
      // kernels/cpu/pooling.cpp runs oneDNN's NHWC kernel between reorders; its
      // workspace is one byte per output (the arg-max position within the window).
      SimTensor x_nhwc = SimTensor::allocate(*ctx.trace, x.shape), y_nhwc = SimTensor::allocate(*ctx.trace, y.shape);
      if (ctx.keep_activations) workspace = SimTensor::allocate(*ctx.trace, spec.output_shape(), DType::u8);
    } else if (ctx.keep_activations && ctx.kernels->backend == Backend::cuda) {
      workspace = SimTensor::allocate(*ctx.trace, spec.output_shape(), DType::i32);  // argmax
    } else if (ctx.keep_activations) {
      workspace = SimTensor::allocate(*ctx.trace, spec.output_shape(), DType::i32);  // reference: argmax
    }
    if (ctx.keep_activations) saved_.push_back({x.shape, workspace});
    row.output(y);
    row.kept(workspace);
    return y;
  }

  SimTensor backward(const SimTensor& dy, SimContext& ctx) override {
    BT_CHECK(!saved_.empty(), "pooling `{}`: simulated backward without a kept forward", name_);
    Saved saved = std::move(saved_.back());
    saved_.pop_back();
    ctx.trace->set_phase("backward " + name_);
    SimTensor dx = SimTensor::allocate(*ctx.trace, saved.input_shape);
    if (ctx.kernels->backend == Backend::cpu) {
      SimTensor dx_nhwc = SimTensor::allocate(*ctx.trace, dx.shape), dy_nhwc = SimTensor::allocate(*ctx.trace, dy.shape);
    }
    return dx;
  }

  void parameter_shapes(std::vector<Shape>&, std::vector<Shape>&) const override {}

 private:
  struct Saved {
    Shape input_shape;
    SimTensor workspace;
  };
  std::string name_;
  int kernel_, stride_, pad_;
  std::vector<Saved> saved_;
};

class SimGlobalAvgPool final : public SimLayer {
 public:
  explicit SimGlobalAvgPool(std::string name) : name_(std::move(name)) {}

  SimTensor forward(const SimTensor& x, SimContext& ctx) override {
    TableRow row(ctx, name_, "avgpool");
    ctx.trace->set_phase("forward " + name_);
    SimTensor y = SimTensor::allocate(*ctx.trace, {x.dim(0), x.dim(1)});
    if (ctx.keep_activations) saved_.push_back(x.shape);
    row.output(y);
    return y;
  }

  SimTensor backward(const SimTensor& dy, SimContext& ctx) override {
    Shape shape = saved_.back();
    saved_.pop_back();
    ctx.trace->set_phase("backward " + name_);
    (void)dy;
    return SimTensor::allocate(*ctx.trace, shape);
  }

  void parameter_shapes(std::vector<Shape>&, std::vector<Shape>&) const override {}

 private:
  std::string name_;
  std::vector<Shape> saved_;
};

class SimLinear final : public SimLayer {
 public:
  SimLinear(std::string name, std::int64_t in, std::int64_t out, bool bias)
      : name_(std::move(name)), in_(in), out_(out), bias_(bias) {}

  SimTensor forward(const SimTensor& x, SimContext& ctx) override {
    BT_CHECK(x.shape.size() == 2 && x.dim(1) == in_, "linear `{}` expects [N,{}], got {}", name_, in_,
             shape_str(x.shape));
    TableRow row(ctx, name_, "linear");
    ctx.trace->set_phase("forward " + name_);
    SimTensor y = SimTensor::allocate(*ctx.trace, {x.dim(0), out_});
    if (ctx.keep_activations) saved_.push_back(x);
    row.output(y);
    row.kept(x);
    row.row().parameters = in_ * out_ + (bias_ ? out_ : 0);
    row.row().parameter_bytes = rounded_f32({out_, in_}) + (bias_ ? rounded_f32({out_}) : 0);
    row.row().forward_flops = 2.0 * static_cast<double>(x.dim(0) * in_ * out_);
    row.row().backward_flops = 2.0 * row.row().forward_flops;
    return y;
  }

  SimTensor backward(const SimTensor& dy, SimContext& ctx) override {
    BT_CHECK(!saved_.empty(), "linear `{}`: simulated backward without a kept forward", name_);
    SimTensor x = std::move(saved_.back());
    saved_.pop_back();
    ctx.trace->set_phase("backward " + name_);
    SimTensor dx = SimTensor::allocate(*ctx.trace, x.shape);
    SimTensor dweight = SimTensor::allocate(*ctx.trace, {out_, in_});
    SimTensor dbias;
    if (bias_) dbias = SimTensor::allocate(*ctx.trace, {out_});
    weight_grad_.accumulate(std::move(dweight), ctx);
    if (bias_) bias_grad_.accumulate(std::move(dbias), ctx);
    (void)dy;
    return dx;
  }

  void parameter_shapes(std::vector<Shape>& parameters, std::vector<Shape>&) const override {
    parameters.push_back({out_, in_});
    if (bias_) parameters.push_back({out_});
  }

 private:
  std::string name_;
  std::int64_t in_, out_;
  bool bias_;
  std::vector<SimTensor> saved_;
  GradSink weight_grad_, bias_grad_;
};

class SimSequential : public SimLayer {
 public:
  template <typename T>
  T& add(std::unique_ptr<T> layer) {
    T& ref = *layer;
    layers_.push_back(std::move(layer));
    return ref;
  }

  SimTensor forward(const SimTensor& x, SimContext& ctx) override {
    SimTensor h = x;
    for (auto& layer : layers_) h = layer->forward(h, ctx);
    return h;
  }

  SimTensor backward(const SimTensor& dy, SimContext& ctx) override {
    SimTensor d = dy;
    for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) d = (*it)->backward(d, ctx);
    return d;
  }

  void parameter_shapes(std::vector<Shape>& parameters, std::vector<Shape>& buffers) const override {
    for (const auto& layer : layers_) layer->parameter_shapes(parameters, buffers);
  }

 private:
  std::vector<std::unique_ptr<SimLayer>> layers_;
};

// net/residual_block.cpp: main branch, optional projection shortcut, in-place add
// into the main branch's last BatchNorm output, in-place ReLU.
class SimResidualBlock final : public SimLayer {
 public:
  SimResidualBlock(std::string name, std::int64_t in, std::int64_t planes, int stride, bool bottleneck)
      : name_(std::move(name)), bottleneck_(bottleneck), relu_out_(name_ + ".relu", false) {
    auto conv = [&](const char* child, std::int64_t i, std::int64_t o, int k, int s, int p) {
      convs_.push_back(std::make_unique<SimConv>(name_ + "." + child, i, o, k, s, p));
    };
    auto bn = [&](const char* child, std::int64_t c) {
      bns_.push_back(std::make_unique<SimBatchNorm>(name_ + "." + child, c));
    };
    if (bottleneck) {
      out_ = planes * 4;
      conv("conv1", in, planes, 1, 1, 0), bn("bn1", planes);
      conv("conv2", planes, planes, 3, stride, 1), bn("bn2", planes);
      conv("conv3", planes, out_, 1, 1, 0), bn("bn3", out_);
      relus_.push_back(std::make_unique<SimReLU>(name_ + ".relu1", false));
      relus_.push_back(std::make_unique<SimReLU>(name_ + ".relu2", false));
    } else {
      out_ = planes;
      conv("conv1", in, planes, 3, stride, 1), bn("bn1", planes);
      conv("conv2", planes, planes, 3, 1, 1), bn("bn2", planes);
      relus_.push_back(std::make_unique<SimReLU>(name_ + ".relu1", false));
    }
    if (stride != 1 || in != out_) {
      downsample_conv_ = std::make_unique<SimConv>(name_ + ".downsample.0", in, out_, 1, stride, 0);
      downsample_bn_ = std::make_unique<SimBatchNorm>(name_ + ".downsample.1", out_);
    }
  }
  std::int64_t out_channels() const { return out_; }

  SimTensor forward(const SimTensor& x, SimContext& ctx) override {
    SimTensor out = main_forward(x, ctx);
    SimTensor identity = x;
    if (downsample_conv_) {
      identity = downsample_conv_->forward(x, ctx);
      identity = downsample_bn_->forward(identity, ctx);
    }
    // The add writes into `out`; the ReLU keeps it.
    TableRow row(ctx, name_, "add+relu");
    SimTensor y = relu_out_.forward(out, ctx);
    row.output(y);
    row.kept(y);
    return y;
  }

  SimTensor backward(const SimTensor& dy, SimContext& ctx) override {
    SimTensor d_sum = relu_out_.backward(dy, ctx);
    SimTensor dx = main_backward(d_sum, ctx);
    SimTensor d_identity = d_sum;
    if (downsample_conv_) d_identity = downsample_conv_->backward(downsample_bn_->backward(d_sum, ctx), ctx);
    return dx;
  }

  void parameter_shapes(std::vector<Shape>& parameters, std::vector<Shape>& buffers) const override {
    for (std::size_t i = 0; i < convs_.size(); ++i) {
      convs_[i]->parameter_shapes(parameters, buffers);
      bns_[i]->parameter_shapes(parameters, buffers);
    }
    if (downsample_conv_) {
      downsample_conv_->parameter_shapes(parameters, buffers);
      downsample_bn_->parameter_shapes(parameters, buffers);
    }
  }

 private:
  // One statement per layer, as the real blocks: each intermediate is freed as soon
  // as the next layer has consumed it (unless kept).
  SimTensor main_forward(const SimTensor& x, SimContext& ctx) {
    SimTensor h = convs_[0]->forward(x, ctx);
    h = bns_[0]->forward(h, ctx);
    h = relus_[0]->forward(h, ctx);
    h = convs_[1]->forward(h, ctx);
    h = bns_[1]->forward(h, ctx);
    if (!bottleneck_) return h;
    h = relus_[1]->forward(h, ctx);
    h = convs_[2]->forward(h, ctx);
    return bns_[2]->forward(h, ctx);
  }

  // The nesting of the real main_backward: an inner call's result is a temporary
  // that lives until the whole statement ends.
  SimTensor main_backward(const SimTensor& dy, SimContext& ctx) {
    if (!bottleneck_) {
      SimTensor d = convs_[1]->backward(bns_[1]->backward(dy, ctx), ctx);
      return convs_[0]->backward(bns_[0]->backward(relus_[0]->backward(d, ctx), ctx), ctx);
    }
    SimTensor d = relus_[1]->backward(convs_[2]->backward(bns_[2]->backward(dy, ctx), ctx), ctx);
    d = relus_[0]->backward(convs_[1]->backward(bns_[1]->backward(d, ctx), ctx), ctx);
    return convs_[0]->backward(bns_[0]->backward(d, ctx), ctx);
  }

  std::string name_;
  bool bottleneck_;
  std::int64_t out_ = 0;
  std::vector<std::unique_ptr<SimConv>> convs_;
  std::vector<std::unique_ptr<SimBatchNorm>> bns_;
  std::vector<std::unique_ptr<SimReLU>> relus_;
  std::unique_ptr<SimConv> downsample_conv_;
  std::unique_ptr<SimBatchNorm> downsample_bn_;
  SimReLU relu_out_;
};

// net/encoder.cpp's structure.
std::unique_ptr<SimLayer> build_encoder(const EncoderSpec& spec) {
  auto encoder = std::make_unique<SimSequential>();
  const std::int64_t stem_channels = spec.scaled(spec.stem_channels);
  // The image gradient is never computed (Encoder::set_input_grad(false)).
  encoder->add(std::make_unique<SimConv>("conv1", spec.in_channels, stem_channels, spec.stem.kernel, spec.stem.stride,
                                         spec.stem.padding, /*input_grad=*/false));
  encoder->add(std::make_unique<SimBatchNorm>("bn1", stem_channels));
  encoder->add(std::make_unique<SimReLU>("relu"));
  if (spec.stem.maxpool) encoder->add(std::make_unique<SimMaxPool>("maxpool", 3, 2, 1));
  std::int64_t in_channels = stem_channels;
  if (spec.family == EncoderFamily::small) {
    for (std::size_t stage = 0; stage < spec.stage_planes.size(); ++stage) {
      const std::int64_t out = spec.scaled(spec.stage_planes[stage]);
      const std::string prefix = fmt::format("layer{}", stage + 1);
      encoder->add(std::make_unique<SimConv>(prefix + ".conv", in_channels, out, 3, 2, 1));
      encoder->add(std::make_unique<SimBatchNorm>(prefix + ".bn", out));
      encoder->add(std::make_unique<SimReLU>(prefix + ".relu"));
      in_channels = out;
    }
  } else {
    for (std::size_t stage = 0; stage < spec.stage_blocks.size(); ++stage) {
      const std::int64_t planes = spec.scaled(spec.stage_planes[stage]);
      for (int index = 0; index < spec.stage_blocks[stage]; ++index) {
        const int stride = (stage > 0 && index == 0) ? 2 : 1;
        auto& block = encoder->add(std::make_unique<SimResidualBlock>(fmt::format("layer{}.{}", stage + 1, index),
                                                                      in_channels, planes, stride,
                                                                      spec.block == BlockType::bottleneck));
        in_channels = block.out_channels();
      }
    }
  }
  encoder->add(std::make_unique<SimGlobalAvgPool>("avgpool"));
  return encoder;
}

// net/aggregator.cpp, with the aggregator's dropout on z.
class SimAggregator final : public SimLayer {
 public:
  SimAggregator(const AggregatorSpec& spec, std::int64_t features) : spec_(spec), features_(features) {
    if (spec.kind == AggregatorKind::attention) {
      v_ = std::make_unique<SimLinear>("aggregator.attention_V", features, spec.hidden, true);
      u_ = std::make_unique<SimLinear>("aggregator.attention_U", features, spec.gated ? spec.hidden : 1, true);
      w_ = std::make_unique<SimLinear>("aggregator.attention_w", spec.hidden, 1, false);
    }
  }

  SimTensor forward(const SimTensor& h, SimContext& ctx) override {
    MemoryTrace& t = *ctx.trace;
    ctx.trace->set_phase("forward aggregator");
    const std::int64_t n = h.dim(0);
    SimTensor z;
    Saved saved;
    saved.tiles = n;
    switch (spec_.kind) {
      case AggregatorKind::mean: z = SimTensor::allocate(t, {features_}); break;
      case AggregatorKind::max:
        z = SimTensor::allocate(t, {features_});
        saved.argmax = SimTensor::allocate(t, {features_}, DType::i32);
        break;
      case AggregatorKind::attention: {
        SimTensor tanh_v = v_->forward(h, ctx);
        SimTensor gate, hidden = tanh_v;
        if (spec_.gated) {
          gate = u_->forward(h, ctx);
          hidden = SimTensor::allocate(t, tanh_v.shape);
        }
        SimTensor scores = w_->forward(hidden, ctx).view({n});
        SimTensor a = SimTensor::allocate(t, {n});
        z = SimTensor::allocate(t, {features_});
        attention_ = a;  // kept for heatmaps until the next forward
        saved.h = h, saved.a = a, saved.tanh_v = tanh_v, saved.gate = gate;
        break;
      }
    }
    if (ctx.keep_activations) saved_.push_back(saved);
    z = z.view({1, features_});
    if (ctx.training && spec_.dropout > 0.0f) {
      SimTensor y = SimTensor::allocate(t, z.shape);
      SimTensor mask = SimTensor::allocate(t, z.shape, DType::u8);
      if (ctx.keep_activations) masks_.push_back(mask);
      return y;
    }
    if (ctx.keep_activations) masks_.push_back({});
    return z;
  }

  SimTensor backward(const SimTensor& dz, SimContext& ctx) override {
    MemoryTrace& t = *ctx.trace;
    ctx.trace->set_phase("backward aggregator");
    SimTensor mask = masks_.back();
    masks_.pop_back();
    SimTensor g = mask.defined() ? SimTensor::allocate(t, dz.shape) : dz;
    Saved s = std::move(saved_.back());
    saved_.pop_back();
    switch (spec_.kind) {
      case AggregatorKind::mean:
      case AggregatorKind::max: return SimTensor::allocate(t, {s.tiles, features_});
      case AggregatorKind::attention: {
        const std::int64_t n = s.tiles;
        SimTensor da = SimTensor::allocate(t, {n}), dh = SimTensor::allocate(t, s.h.shape);
        SimTensor dscores = SimTensor::allocate(t, {n});
        SimTensor dhidden = w_->backward(dscores.view({n, 1}), ctx);
        SimTensor dtanh = dhidden;
        if (spec_.gated) {
          dtanh = SimTensor::allocate(t, dhidden.shape);
          SimTensor dgate = SimTensor::allocate(t, dhidden.shape);
          SimTensor dh_u = u_->backward(dgate, ctx);
        }
        SimTensor dh_v = v_->backward(dtanh, ctx);
        return dh;
      }
    }
    return {};
  }

  void parameter_shapes(std::vector<Shape>& parameters, std::vector<Shape>& buffers) const override {
    if (spec_.kind != AggregatorKind::attention) return;
    v_->parameter_shapes(parameters, buffers);
    if (spec_.gated) u_->parameter_shapes(parameters, buffers);
    w_->parameter_shapes(parameters, buffers);
  }

 private:
  struct Saved {
    std::int64_t tiles = 0;
    SimTensor argmax, h, a, tanh_v, gate;
  };
  AggregatorSpec spec_;
  std::int64_t features_;
  std::unique_ptr<SimLinear> v_, u_, w_;
  std::vector<Saved> saved_;
  std::vector<SimTensor> masks_;
  SimTensor attention_;
};

}  // namespace

std::unique_ptr<SimLayer> make_sim_encoder(const EncoderSpec& spec) { return build_encoder(spec); }

std::unique_ptr<SimLayer> make_sim_linear(std::string name, std::int64_t in_features, std::int64_t out_features,
                                          bool bias) {
  return std::make_unique<SimLinear>(std::move(name), in_features, out_features, bias);
}

std::unique_ptr<SimLayer> make_sim_aggregator(const AggregatorSpec& spec, std::int64_t features) {
  return std::make_unique<SimAggregator>(spec, features);
}

ParameterMemory parameter_memory(const SimLayer& layer) {
  std::vector<Shape> parameters, buffers;
  layer.parameter_shapes(parameters, buffers);
  ParameterMemory memory;
  for (const Shape& shape : parameters) {
    memory.count += shape_numel(shape);
    memory.values += rounded_f32(shape);
  }
  memory.gradients = memory.values;
  memory.optimizer_slot = memory.values;
  for (const Shape& shape : buffers) memory.buffers += rounded_f32(shape);
  return memory;
}

int optimizer_slots(const std::string& optimizer, double momentum) {
  if (optimizer == "adamw") return 2;
  if (optimizer == "sgd") return momentum != 0.0 ? 1 : 0;
  throw Error(fmt::format("unknown optimizer '{}'; valid: sgd, adamw", optimizer));
}

EncoderPlan plan_encoder(const EncoderSpec& spec, const Shape& input, const KernelMemoryModel& kernels,
                         bool freeze_bn) {
  BT_CHECK(input.size() == 4 && input[1] == spec.in_channels && input[0] > 0 && input[2] > 0 && input[3] > 0,
           "plan of encoder '{}': input must be [N>0, {}, H>0, W>0], got {}", spec.preset, spec.in_channels,
           shape_str(input));
  EncoderPlan plan;
  plan.input = input;
  plan.parameters = parameter_memory(*make_sim_encoder(spec));

  {  // Pass 1 / inference: nothing kept. The trace outlives the layers holding its blocks.
    MemoryTrace trace;
    std::unique_ptr<SimLayer> encoder = make_sim_encoder(spec);
    SimContext ctx{.trace = &trace, .kernels = &kernels, .training = true, .keep_activations = false,
                   .freeze_bn = freeze_bn};
    SimTensor x = SimTensor::allocate(trace, input);
    SimTensor features = encoder->forward(x, ctx);
    plan.inference_peak = trace.peak();
  }
  MemoryTrace trace;
  std::unique_ptr<SimLayer> encoder = make_sim_encoder(spec);
  SimContext ctx{.trace = &trace, .kernels = &kernels, .training = true, .keep_activations = true,
                 .freeze_bn = freeze_bn, .table = &plan.layers};
  {
    SimTensor x = SimTensor::allocate(trace, input);
    plan.input_bytes = x.bytes();
    SimTensor features = encoder->forward(x, ctx);
    ctx.table = nullptr;
    for (const LayerPlan& row : plan.layers) plan.kept_bytes += row.kept_bytes;
    // The upstream gradient is a view of rows the caller holds (dL/dH): no allocation.
    encoder->backward(SimTensor{features.shape, nullptr}, ctx);
  }
  plan.train_peak = trace.peak();
  plan.train_peak_phase = trace.peak_phase();
  for (const LayerPlan& row : plan.layers) {
    plan.forward_flops += row.forward_flops;
    plan.backward_flops += row.backward_flops;
  }
  return plan;
}

}  // namespace bigtrain::net
