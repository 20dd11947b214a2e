#include "kernels/cpu/conv2d.hpp"

#include <optional>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "kernels/cpu/dnnl_context.hpp"

namespace bigtrain::kernels::cpu {

namespace {

using dnnl::memory;
using Args = std::unordered_map<int, memory>;

memory::desc plain_desc(const memory::dims& dims) {
  return {dims, memory::data_type::f32, dims.size() == 5 ? memory::format_tag::goihw : memory::format_tag::nchw};
}
memory::desc any_desc(const memory::dims& dims) { return {dims, memory::data_type::f32, memory::format_tag::any}; }
memory::desc nhwc_desc(const memory::dims& dims) { return {dims, memory::data_type::f32, memory::format_tag::nhwc}; }

// True when two descriptors place every element at the same offset, e.g. nchw and
// nhwc of a one-channel tensor: then the tensor is used as it is, no copy.
bool same_bytes(const memory::desc& a, const memory::desc& b) {
  if (a == b) return true;
  const dnnl_memory_desc_t &x = a.data, &y = b.data;
  if (x.ndims != y.ndims || x.data_type != y.data_type || x.format_kind != dnnl_blocked ||
      y.format_kind != dnnl_blocked || x.format_desc.blocking.inner_nblks != 0 ||
      y.format_desc.blocking.inner_nblks != 0 || x.offset0 != y.offset0)
    return false;
  for (int d = 0; d < x.ndims; ++d) {
    if (x.dims[d] != y.dims[d] || x.padded_dims[d] != y.padded_dims[d]) return false;
    if (x.dims[d] > 1 && x.format_desc.blocking.strides[d] != y.format_desc.blocking.strides[d]) return false;
  }
  return true;
}

// Bytes from the caching allocator: counted by its peak statistics and, after the
// first step, served from its cache without reaching the system allocator. Buffers
// are taken per call rather than held by the op, so a network's dozens of conv
// objects do not each pin their largest temporaries between calls.
memory bind_buffer(memory& target, std::size_t bytes, Tensor& owner) {
  if (bytes == 0) return target;
  owner = Tensor::empty({static_cast<std::int64_t>(bytes)}, DType::u8);
  target.set_data_handle(owner.raw_data());
  return target;
}

// One tensor argument of a primitive. Tensors are plain NCHW/OIHW; the primitive
// chose its own layout (format_tag::any), usually blocked (nChw8c, OIhw8i8o on
// AVX2) because that is what its fastest kernels read. When the two differ, a
// reorder primitive (built once) copies between the tensor and a temporary.
//
// Where this costs: every call reorders the activation in and the result out, and
// the weights, although they only change at optimizer steps (a weight cache would
// need a version counter on Tensor to be safe). Measured on this 2-core AVX2
// machine, batch 8, ResNet-18 shapes: ~5-7% over the same primitives on blocked
// memory for 3x3 layers (weights included: 5% of the 512-channel layer), but 2x
// for the 1x1 stride-2 downsample, whose input reorder is 4x its output. PyTorch's
// NCHW path pays the same reorders. The interface trades that for plain tensors
// everywhere else (reference, tests, checkpoints, other ops).
class LayoutBridge {
 public:
  enum class Role { input, output };

  void init(const memory::desc& plain, const memory::desc& chosen, Role role) {
    role_ = role;
    reordered_ = !same_bytes(plain, chosen);
    if (!reordered_) {
      plain_ = inner_ = memory(chosen, engine(), DNNL_MEMORY_NONE);
      return;
    }
    plain_ = memory(plain, engine(), DNNL_MEMORY_NONE);
    inner_ = memory(chosen, engine(), DNNL_MEMORY_NONE);
    bytes_ = chosen.get_size();
    reorder_ = role == Role::input ? dnnl::reorder(plain_, inner_) : dnnl::reorder(inner_, plain_);
  }

  // The memory the primitive reads or writes; it stays the same object across calls.
  const memory& primitive_memory() const { return inner_; }
  bool reordered() const { return reordered_; }

  // Points the bridge at `data` for one call; an input is reordered right away.
  void bind(const void* data, Tensor& temporary) {
    plain_.set_data_handle(const_cast<void*>(data));
    if (!reordered_) return;
    bind_buffer(inner_, bytes_, temporary);
    if (role_ == Role::input) reorder_.execute(stream(), plain_, inner_);
  }
  // After the primitive ran: an output is reordered back into the tensor.
  void finish() {
    if (reordered_ && role_ == Role::output) reorder_.execute(stream(), inner_, plain_);
  }

 private:
  Role role_ = Role::input;
  memory plain_, inner_;
  dnnl::reorder reorder_;
  bool reordered_ = false;
  std::size_t bytes_ = 0;
};

// oneDNN silently falls back to its reference loops for shapes no optimised kernel
// takes (measured 100x slower); say so once per layer, so a slow run has a cause.
void warn_if_reference(const char* pass, const std::string& implementation, const Conv2dSpec& s) {
  if (implementation.rfind("ref", 0) != 0) return;
  spdlog::warn("conv2d (cpu) {}: oneDNN has no optimised kernel for input {} weight {} stride {}x{} padding {}x{} "
               "dilation {}x{} groups {}; its reference implementation ({}) will be slow",
               pass, shape_str(s.input_shape()), shape_str(s.weight_shape()), s.stride_h, s.stride_w, s.pad_h,
               s.pad_w, s.dilation_h, s.dilation_w, s.groups, implementation);
}

// Scratchpad in user mode: oneDNN would otherwise malloc it inside every call.
dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

class DnnlConv2d final : public Conv2d {
 public:
  explicit DnnlConv2d(const Conv2dSpec& spec) : spec_(spec) {
    const memory::dim g = spec.groups;
    src_dims_ = {spec.batch, spec.in_channels, spec.in_h, spec.in_w};
    dst_dims_ = {spec.batch, spec.out_channels, spec.out_h(), spec.out_w()};
    // A grouped OIHW tensor is goihw in memory: [G][O/G][I/G][KH][KW].
    weight_dims_ = g == 1 ? memory::dims{spec.out_channels, spec.in_channels, spec.kernel_h, spec.kernel_w}
                          : memory::dims{g, spec.out_channels / g, spec.in_channels / g, spec.kernel_h, spec.kernel_w};
    bias_desc_ = spec.bias ? memory::desc({spec.out_channels}, memory::data_type::f32, memory::format_tag::a)
                           : memory::desc();
    strides_ = {spec.stride_h, spec.stride_w};
    dilates_ = {spec.dilation_h - 1, spec.dilation_w - 1};  // oneDNN counts the gaps: 0 = dense
    padding_l_ = {spec.pad_h, spec.pad_w};
    // PyTorch floors the output size; with symmetric padding oneDNN's size formula
    // floors the same way, so unused bottom/right rows are simply not read.
    padding_r_ = {spec.pad_h, spec.pad_w};

    dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                         any_desc(src_dims_), any_desc(weight_dims_), bias_desc_,
                                         any_desc(dst_dims_), strides_, dilates_, padding_l_, padding_r_);
    fwd_pd_ = dnnl::convolution_forward::primitive_desc(desc, user_scratchpad(), engine());
    fwd_ = dnnl::convolution_forward(fwd_pd_);
    warn_if_reference("forward", fwd_pd_.impl_info_str(), spec);
    fwd_src_.init(plain_desc(src_dims_), fwd_pd_.src_desc(), LayoutBridge::Role::input);
    fwd_weights_.init(plain_desc(weight_dims_), fwd_pd_.weights_desc(), LayoutBridge::Role::input);
    fwd_dst_.init(plain_desc(dst_dims_), fwd_pd_.dst_desc(), LayoutBridge::Role::output);
    fwd_bias_ = memory(bias_desc_, engine(), DNNL_MEMORY_NONE);
    fwd_scratch_ = memory(fwd_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    fwd_args_ = {{DNNL_ARG_SRC, fwd_src_.primitive_memory()},
                 {DNNL_ARG_WEIGHTS, fwd_weights_.primitive_memory()},
                 {DNNL_ARG_DST, fwd_dst_.primitive_memory()},
                 {DNNL_ARG_SCRATCHPAD, fwd_scratch_}};
    if (spec.bias) fwd_args_[DNNL_ARG_BIAS] = fwd_bias_;
  }

  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    Tensor src_tmp, weights_tmp, dst_tmp, scratch;
    fwd_src_.bind(x.raw_data(), src_tmp);
    fwd_weights_.bind(weight.raw_data(), weights_tmp);
    fwd_dst_.bind(y.raw_data(), dst_tmp);
    if (bias) fwd_bias_.set_data_handle(bias->raw_data());
    bind_buffer(fwd_scratch_, fwd_pd_.scratchpad_desc().get_size(), scratch);
    fwd_.execute(stream(), fwd_args_);
    fwd_dst_.finish();
    stream().wait();
  }

  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    if (!bwd_data_) build_explained("backward-data", [&] { build_backward_data(); });
    Tensor diff_dst_tmp, weights_tmp, diff_src_tmp, scratch;
    bwd_data_diff_dst_.bind(dy.raw_data(), diff_dst_tmp);
    bwd_data_weights_.bind(weight.raw_data(), weights_tmp);
    bwd_data_diff_src_.bind(dx.raw_data(), diff_src_tmp);
    bind_buffer(bwd_data_scratch_, bwd_data_pd_.scratchpad_desc().get_size(), scratch);
    bwd_data_->execute(stream(), bwd_data_args_);
    bwd_data_diff_src_.finish();
    stream().wait();
  }

  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    if (!bwd_weights_) build_explained("backward-weights", [&] { build_backward_weights(); });
    Tensor src_tmp, diff_dst_tmp, diff_weights_tmp, scratch;
    bwd_weights_src_.bind(x.raw_data(), src_tmp);
    bwd_weights_diff_dst_.bind(dy.raw_data(), diff_dst_tmp);
    bwd_weights_diff_weights_.bind(dweight.raw_data(), diff_weights_tmp);
    if (dbias) bwd_weights_diff_bias_.set_data_handle(dbias->raw_data());
    bind_buffer(bwd_weights_scratch_, bwd_weights_pd_.scratchpad_desc().get_size(), scratch);
    bwd_weights_->execute(stream(), bwd_weights_args_);
    bwd_weights_diff_weights_.finish();
    stream().wait();
  }

 private:
  template <typename Build>
  void build_explained(const char* pass, Build&& build) {
    try {
      build();
    } catch (const dnnl::error& e) {
      throw Error(fmt::format("conv2d (cpu): oneDNN cannot build the {} primitive for input {} weight {}: {}", pass,
                              shape_str(spec_.input_shape()), shape_str(spec_.weight_shape()), e.what()));
    }
  }

  // Backward primitives are built on first use: an inference-only layer never pays
  // for their JIT code and memory.
  void build_backward_data() {
    // Backward-data stays on format_tag::any even for narrow inputs: there nhwc
    // measured 2x slower than the GEMM path oneDNN picks for a 3-channel stem.
    dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, any_desc(src_dims_),
                                               any_desc(weight_dims_), any_desc(dst_dims_), strides_, dilates_,
                                               padding_l_, padding_r_);
    bwd_data_pd_ = dnnl::convolution_backward_data::primitive_desc(desc, user_scratchpad(), engine(), fwd_pd_);
    bwd_data_diff_dst_.init(plain_desc(dst_dims_), bwd_data_pd_.diff_dst_desc(), LayoutBridge::Role::input);
    bwd_data_weights_.init(plain_desc(weight_dims_), bwd_data_pd_.weights_desc(), LayoutBridge::Role::input);
    bwd_data_diff_src_.init(plain_desc(src_dims_), bwd_data_pd_.diff_src_desc(), LayoutBridge::Role::output);
    bwd_data_scratch_ = memory(bwd_data_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    bwd_data_args_ = {{DNNL_ARG_DIFF_DST, bwd_data_diff_dst_.primitive_memory()},
                      {DNNL_ARG_WEIGHTS, bwd_data_weights_.primitive_memory()},
                      {DNNL_ARG_DIFF_SRC, bwd_data_diff_src_.primitive_memory()},
                      {DNNL_ARG_SCRATCHPAD, bwd_data_scratch_}};
    bwd_data_.emplace(bwd_data_pd_);
    warn_if_reference("backward-data", bwd_data_pd_.impl_info_str(), spec_);
  }

  void build_backward_weights() {
    // Inputs with few channels (a grayscale or RGB stem) would be padded to the
    // 8-channel block of nChw8c: 8x the memory and 8x the work for the weight
    // gradient (1-channel 7x7 stride-2 stem, batch 8: 34 ms at 224, 176 ms at 512,
    // against 10 ms and 85 ms in nhwc). oneDNN's AVX2 kernels take such layers in
    // nhwc, which for one channel is the very same bytes as NCHW: no input reorder.
    // The forward pass keeps format_tag::any: it reads NCHW directly there and was
    // 20-30% faster than nhwc (the 11x11 stride-4 stem: equal).
    const bool narrow_input = spec_.groups == 1 && spec_.in_channels < 8;
    auto activation_desc = [&](const memory::dims& dims) { return narrow_input ? nhwc_desc(dims) : any_desc(dims); };
    dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, activation_desc(src_dims_),
                                                  any_desc(weight_dims_), bias_desc_, activation_desc(dst_dims_),
                                                  strides_, dilates_, padding_l_, padding_r_);
    bwd_weights_pd_ =
        dnnl::convolution_backward_weights::primitive_desc(desc, user_scratchpad(), engine(), fwd_pd_);
    bwd_weights_src_.init(plain_desc(src_dims_), bwd_weights_pd_.src_desc(), LayoutBridge::Role::input);
    bwd_weights_diff_dst_.init(plain_desc(dst_dims_), bwd_weights_pd_.diff_dst_desc(), LayoutBridge::Role::input);
    bwd_weights_diff_weights_.init(plain_desc(weight_dims_), bwd_weights_pd_.diff_weights_desc(),
                                   LayoutBridge::Role::output);
    bwd_weights_diff_bias_ = memory(bias_desc_, engine(), DNNL_MEMORY_NONE);
    bwd_weights_scratch_ = memory(bwd_weights_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    bwd_weights_args_ = {{DNNL_ARG_SRC, bwd_weights_src_.primitive_memory()},
                         {DNNL_ARG_DIFF_DST, bwd_weights_diff_dst_.primitive_memory()},
                         {DNNL_ARG_DIFF_WEIGHTS, bwd_weights_diff_weights_.primitive_memory()},
                         {DNNL_ARG_SCRATCHPAD, bwd_weights_scratch_}};
    if (spec_.bias) bwd_weights_args_[DNNL_ARG_DIFF_BIAS] = bwd_weights_diff_bias_;
    bwd_weights_.emplace(bwd_weights_pd_);
    warn_if_reference("backward-weights", bwd_weights_pd_.impl_info_str(), spec_);
  }

  Conv2dSpec spec_;
  memory::dims src_dims_, dst_dims_, weight_dims_, strides_, dilates_, padding_l_, padding_r_;
  memory::desc bias_desc_;

  dnnl::convolution_forward::primitive_desc fwd_pd_;
  dnnl::convolution_forward fwd_;
  LayoutBridge fwd_src_, fwd_weights_, fwd_dst_;
  memory fwd_bias_, fwd_scratch_;
  Args fwd_args_;

  dnnl::convolution_backward_data::primitive_desc bwd_data_pd_;
  std::optional<dnnl::convolution_backward_data> bwd_data_;
  LayoutBridge bwd_data_diff_dst_, bwd_data_weights_, bwd_data_diff_src_;
  memory bwd_data_scratch_;
  Args bwd_data_args_;

  dnnl::convolution_backward_weights::primitive_desc bwd_weights_pd_;
  std::optional<dnnl::convolution_backward_weights> bwd_weights_;
  LayoutBridge bwd_weights_src_, bwd_weights_diff_dst_, bwd_weights_diff_weights_;
  memory bwd_weights_diff_bias_, bwd_weights_scratch_;
  Args bwd_weights_args_;
};

}  // namespace

std::unique_ptr<Conv2d> make_conv2d(const Conv2dSpec& spec) {
  try {
    return std::make_unique<DnnlConv2d>(spec);
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("conv2d (cpu): oneDNN cannot build a convolution for input {} weight {} stride {}x{} "
                            "padding {}x{} dilation {}x{} groups {}: {}",
                            shape_str(spec.input_shape()), shape_str(spec.weight_shape()), spec.stride_h,
                            spec.stride_w, spec.pad_h, spec.pad_w, spec.dilation_h, spec.dilation_w, spec.groups,
                            e.what()));
  }
}

}  // namespace bigtrain::kernels::cpu
