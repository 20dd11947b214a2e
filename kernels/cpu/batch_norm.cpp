#include "kernels/cpu/batch_norm.hpp"

#include <cmath>
#include <optional>
#include <unordered_map>

#include "kernels/core/error.hpp"
#include "kernels/cpu/dnnl_context.hpp"

namespace bigtrain::kernels::cpu {

namespace {

using dnnl::memory;
using dnnl::normalization_flags;
using Args = std::unordered_map<int, memory>;

// Separate scale and shift (not the older packed use_scale_shift) so gamma and
// beta are passed as they are, without packing them into a 2xC buffer every call.
const normalization_flags kAffine = normalization_flags::use_scale | normalization_flags::use_shift;

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

// Points a cached memory object at a tensor's buffer for one call.
void bind(const memory& target, const Tensor& tensor) { target.set_data_handle(tensor.raw_data()); }

// Scratchpad bytes from the caching allocator (counted, and reused after the first step).
void bind_scratchpad(const memory& target, std::size_t bytes, Tensor& owner) {
  if (bytes == 0) return;
  owner = Tensor::empty({static_cast<std::int64_t>(bytes)}, DType::u8);
  target.set_data_handle(owner.raw_data());
}

// Primitives are built lazily inside calls; a oneDNN refusal becomes a bigtrain::Error naming the op.
template <typename Build>
void build_explained(const BatchNormSpec& spec, const char* what, Build&& build) {
  try {
    build();
  } catch (const dnnl::error& e) {
    throw Error(fmt::format("batch_norm (cpu): oneDNN cannot build the {} primitive for input {}: {}", what,
                            shape_str(spec.input_shape()), e.what()));
  }
}

class DnnlBatchNorm2d final : public BatchNorm2d {
 public:
  explicit DnnlBatchNorm2d(const BatchNormSpec& spec)
      : spec_(spec),
        // Plain NCHW, the layout of the tensors: no reorders around this op.
        data_desc_({spec.batch, spec.channels, spec.height, spec.width}, memory::data_type::f32,
                   memory::format_tag::nchw),
        channel_desc_({spec.channels}, memory::data_type::f32, memory::format_tag::a) {
    for (memory* m : {&src_, &dst_, &diff_dst_, &diff_src_}) *m = memory(data_desc_, engine(), DNNL_MEMORY_NONE);
    for (memory* m : {&scale_, &shift_, &mean_, &variance_, &diff_scale_, &diff_shift_})
      *m = memory(channel_desc_, engine(), DNNL_MEMORY_NONE);
  }

  void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& save_mean,
                        Tensor& save_invstd, Tensor* running_mean, Tensor* running_var, float momentum) override {
    if (!train_fwd_) build_explained(spec_, "training forward", [&] { build_training_forward(); });
    Tensor variance = Tensor::empty(spec_.channel_shape()), scratch;
    bind(src_, x), bind(scale_, gamma), bind(shift_, beta), bind(dst_, y), bind(mean_, save_mean);
    bind(variance_, variance);
    bind_scratchpad(train_fwd_scratch_, train_fwd_pd_.scratchpad_desc().get_size(), scratch);
    train_fwd_->execute(stream(), train_fwd_args_);
    stream().wait();

    // oneDNN returns the biased variance; the interface wants 1/sqrt(var + eps) for
    // backward, and the running variance is updated with the unbiased one, as PyTorch.
    const std::int64_t count = spec_.batch * spec_.height * spec_.width;
    const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
    const float* var = variance.f32();
    const float* mean = save_mean.f32();
    float* invstd = save_invstd.f32();
    for (std::int64_t c = 0; c < spec_.channels; ++c) {
      invstd[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[c]) + spec_.epsilon));
      if (running_mean) {
        float& rm = running_mean->f32()[c];
        float& rv = running_var->f32()[c];
        rm = static_cast<float>((1.0 - momentum) * rm + static_cast<double>(momentum) * mean[c]);
        rv = static_cast<float>((1.0 - momentum) * rv + static_cast<double>(momentum) * var[c] * unbias);
      }
    }
  }

  void forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                         const Tensor& running_var, Tensor& y) override {
    if (!infer_fwd_) build_explained(spec_, "inference forward", [&] { build_inference_forward(); });
    Tensor scratch;
    bind(src_, x), bind(scale_, gamma), bind(shift_, beta), bind(dst_, y);
    bind(mean_, running_mean), bind(variance_, running_var);
    bind_scratchpad(infer_fwd_scratch_, infer_fwd_pd_.scratchpad_desc().get_size(), scratch);
    infer_fwd_->execute(stream(), infer_fwd_args_);
    stream().wait();
  }

  void backward_training(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                         const Tensor& save_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    if (!train_bwd_) build_explained(spec_, "training backward", [&] { build_training_backward(); });
    // oneDNN takes the variance; invert the saved invstd in double. For var << eps the
    // subtraction cancels, but oneDNN adds eps straight back, recovering invstd to
    // float rounding, which is all that enters the gradient.
    Tensor variance = Tensor::empty(spec_.channel_shape()), scratch;
    for (std::int64_t c = 0; c < spec_.channels; ++c) {
      const double s = save_invstd.f32()[c];
      variance.f32()[c] = static_cast<float>(1.0 / (s * s) - spec_.epsilon);
    }
    bind(src_, x), bind(diff_dst_, dy), bind(scale_, gamma), bind(shift_, gamma), bind(mean_, save_mean);
    bind(variance_, variance);
    bind(diff_src_, dx), bind(diff_scale_, dgamma), bind(diff_shift_, dbeta);
    bind_scratchpad(train_bwd_scratch_, train_bwd_pd_.scratchpad_desc().get_size(), scratch);
    train_bwd_->execute(stream(), train_bwd_args_);
    stream().wait();
  }

  void backward_inference(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& running_mean,
                          const Tensor& running_var, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    if (!infer_bwd_) build_explained(spec_, "frozen backward", [&] { build_inference_backward(); });
    Tensor scratch;
    bind(src_, x), bind(diff_dst_, dy), bind(scale_, gamma), bind(shift_, gamma), bind(mean_, running_mean);
    bind(variance_, running_var);
    bind(diff_src_, dx), bind(diff_scale_, dgamma), bind(diff_shift_, dbeta);
    bind_scratchpad(infer_bwd_scratch_, infer_bwd_pd_.scratchpad_desc().get_size(), scratch);
    infer_bwd_->execute(stream(), infer_bwd_args_);
    stream().wait();
  }

 private:
  // Each primitive is built on its first use and reused after: a frozen encoder
  // never builds the training ones, an inference run never the backward ones.
  void build_training_forward() {
    dnnl::batch_normalization_forward::desc desc(dnnl::prop_kind::forward_training, data_desc_, spec_.epsilon,
                                                 kAffine);
    train_fwd_pd_ = dnnl::batch_normalization_forward::primitive_desc(desc, user_scratchpad(), engine());
    train_fwd_scratch_ = memory(train_fwd_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    train_fwd_args_ = {{DNNL_ARG_SRC, src_},   {DNNL_ARG_SCALE, scale_},       {DNNL_ARG_SHIFT, shift_},
                       {DNNL_ARG_DST, dst_},   {DNNL_ARG_MEAN, mean_},         {DNNL_ARG_VARIANCE, variance_},
                       {DNNL_ARG_SCRATCHPAD, train_fwd_scratch_}};
    train_fwd_.emplace(train_fwd_pd_);
  }

  void build_inference_forward() {
    dnnl::batch_normalization_forward::desc desc(dnnl::prop_kind::forward_inference, data_desc_, spec_.epsilon,
                                                 kAffine | normalization_flags::use_global_stats);
    infer_fwd_pd_ = dnnl::batch_normalization_forward::primitive_desc(desc, user_scratchpad(), engine());
    infer_fwd_scratch_ = memory(infer_fwd_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    infer_fwd_args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_SCALE, scale_}, {DNNL_ARG_SHIFT, shift_},
                       {DNNL_ARG_DST, dst_}, {DNNL_ARG_MEAN, mean_},   {DNNL_ARG_VARIANCE, variance_},
                       {DNNL_ARG_SCRATCHPAD, infer_fwd_scratch_}};
    infer_fwd_.emplace(infer_fwd_pd_);
  }

  void build_training_backward() {
    if (!train_fwd_) build_training_forward();  // the backward pd takes the forward one as a hint
    dnnl::batch_normalization_backward::desc desc(dnnl::prop_kind::backward, data_desc_, data_desc_, spec_.epsilon,
                                                  kAffine);
    train_bwd_pd_ =
        dnnl::batch_normalization_backward::primitive_desc(desc, user_scratchpad(), engine(), train_fwd_pd_);
    train_bwd_scratch_ = memory(train_bwd_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    train_bwd_args_ = backward_args(train_bwd_scratch_);
    train_bwd_.emplace(train_bwd_pd_);
  }

  void build_inference_backward() {
    // With use_global_stats the statistics are inputs, constant for the gradient:
    // dx = gamma * invstd * dy, exactly the frozen-BatchNorm derivative.
    dnnl::batch_normalization_forward::desc hint_desc(dnnl::prop_kind::forward_training, data_desc_, spec_.epsilon,
                                                      kAffine | normalization_flags::use_global_stats);
    const dnnl::batch_normalization_forward::primitive_desc hint(hint_desc, engine());
    dnnl::batch_normalization_backward::desc desc(dnnl::prop_kind::backward, data_desc_, data_desc_, spec_.epsilon,
                                                  kAffine | normalization_flags::use_global_stats);
    infer_bwd_pd_ = dnnl::batch_normalization_backward::primitive_desc(desc, user_scratchpad(), engine(), hint);
    infer_bwd_scratch_ = memory(infer_bwd_pd_.scratchpad_desc(), engine(), DNNL_MEMORY_NONE);
    infer_bwd_args_ = backward_args(infer_bwd_scratch_);
    infer_bwd_.emplace(infer_bwd_pd_);
  }

  // oneDNN 2.6 refuses to execute a backward pass built with use_shift unless a
  // SHIFT argument is bound, although the gradient never reads it (beta does not
  // enter dx, dgamma or dbeta); the calls bind gamma's buffer there.
  Args backward_args(const memory& scratch) const {
    return {{DNNL_ARG_SRC, src_},           {DNNL_ARG_DIFF_DST, diff_dst_},     {DNNL_ARG_SCALE, scale_},
            {DNNL_ARG_SHIFT, shift_},       {DNNL_ARG_MEAN, mean_},         {DNNL_ARG_VARIANCE, variance_},     {DNNL_ARG_DIFF_SRC, diff_src_},
            {DNNL_ARG_DIFF_SCALE, diff_scale_}, {DNNL_ARG_DIFF_SHIFT, diff_shift_}, {DNNL_ARG_SCRATCHPAD, scratch}};
  }

  BatchNormSpec spec_;
  memory::desc data_desc_, channel_desc_;
  // One memory object per argument role, shared by the primitives' argument maps and
  // pointed at the caller's tensors on each call.
  memory src_, dst_, diff_dst_, diff_src_, scale_, shift_, mean_, variance_, diff_scale_, diff_shift_;

  dnnl::batch_normalization_forward::primitive_desc train_fwd_pd_, infer_fwd_pd_;
  dnnl::batch_normalization_backward::primitive_desc train_bwd_pd_, infer_bwd_pd_;
  std::optional<dnnl::batch_normalization_forward> train_fwd_, infer_fwd_;
  std::optional<dnnl::batch_normalization_backward> train_bwd_, infer_bwd_;
  memory train_fwd_scratch_, infer_fwd_scratch_, train_bwd_scratch_, infer_bwd_scratch_;
  Args train_fwd_args_, infer_fwd_args_, train_bwd_args_, infer_bwd_args_;
};

}  // namespace

std::unique_ptr<BatchNorm2d> make_batch_norm(const BatchNormSpec& spec) {
  return std::make_unique<DnnlBatchNorm2d>(spec);  // primitives are built on first use
}

}  // namespace bigtrain::kernels::cpu
