#include "kernels/cpu/layout_bridge.hpp"

#include "kernels/core/error.hpp"
#include "kernels/cpu/dnnl_context.hpp"

namespace bigtrain::kernels::cpu {

using dnnl::memory;

void bind_buffer(memory& target, std::size_t bytes, Tensor& owner) {
  if (bytes == 0) return;
  owner = Tensor::empty({static_cast<std::int64_t>(bytes)}, DType::u8);
  target.set_data_handle(owner.raw_data());
}

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

memory::desc layout_desc(const memory::dims& dims, Layout layout) {
  using tag = memory::format_tag;
  switch (layout) {
    case Layout::blocked8: return {dims, memory::data_type::f32, tag::nChw8c};
    case Layout::blocked16: return {dims, memory::data_type::f32, tag::nChw16c};
    case Layout::nhwc: return {dims, memory::data_type::f32, tag::nhwc};
    case Layout::plain: break;
  }
  return {dims, memory::data_type::f32, dims.size() == 5 ? tag::goihw : dims.size() == 2 ? tag::nc : tag::nchw};
}

memory::desc without_trailing_unit_dims(const memory::desc& desc) {
  memory::dims dims = desc.dims();
  const std::size_t rank = dims.size();
  while (dims.size() > 2 && dims.back() == 1) dims.pop_back();
  if (dims.size() == rank) return desc;
  try {
    return desc.reshape(dims);
  } catch (const dnnl::error&) {
    return desc;  // a layout that blocks one of those dimensions
  }
}

OutputReorder::OutputReorder(const memory::desc& from, const memory::desc& to, const dnnl::primitive_attr& attr)
    : from_(without_trailing_unit_dims(from), engine(), DNNL_MEMORY_NONE),
      to_(without_trailing_unit_dims(to), engine(), DNNL_MEMORY_NONE),
      reorder_(dnnl::reorder::primitive_desc(from_, to_, attr)) {}

void OutputReorder::execute(const memory& from, const memory& to) {
  from_.set_data_handle(from.get_data_handle());
  to_.set_data_handle(to.get_data_handle());
  reorder_.execute(stream(), from_, to_);
}

void LayoutBridge::init(const memory::desc& plain, const memory::desc& chosen, Role role, bool blocked_output) {
  role_ = role;
  blocked_output_ = blocked_output;
  plain_desc_ = plain;
  dims_ = plain.dims();
  bytes_ = chosen.get_size();
  chosen_layout_.reset();
  if (same_bytes(plain, chosen)) {
    chosen_layout_ = Layout::plain;
  } else if (dims_.size() == 4) {
    for (Layout layout : {Layout::blocked8, Layout::blocked16, Layout::nhwc})
      if (dims_[1] % layout_block(layout) == 0 && same_bytes(layout_desc(dims_, layout), chosen))
        chosen_layout_ = layout;
  }
  // A choice no Tensor can hold (another oneDNN format) is written out blocked all
  // the same where the op may leave its output blocked: the ops between
  // convolutions run on blocked tensors, and a block moves 32- or 64-byte runs
  // where NCHW would be a full transpose (docs/performance.md, twenty-second session).
  writable_block_ = Layout::plain;
  if (chosen_layout_) {
    writable_block_ = *chosen_layout_;
  } else if (blocked_output_ && dims_.size() == 4) {
    for (Layout layout : {Layout::blocked8, Layout::blocked16})
      if (dims_[1] % layout_block(layout) == 0) writable_block_ = layout;
  }
  inner_ = memory(chosen, engine(), DNNL_MEMORY_NONE);
  for (auto& reorder : input_reorders_) reorder.reset();
  for (auto& reorder : output_reorders_) reorder.reset();
  accumulating_reorder_.reset();
}

memory& LayoutBridge::make_outer(Layout layout) {
  memory& outer = outer_for(layout);
  outer = memory(layout == Layout::plain ? plain_desc_ : layout_desc(dims_, layout), engine(), DNNL_MEMORY_NONE);
  return outer;
}

dnnl::reorder& LayoutBridge::input_reorder_for(Layout layout) {
  auto& reorder = input_reorders_[static_cast<int>(layout)];
  if (!reorder) reorder = dnnl::reorder(make_outer(layout), inner_);
  return *reorder;
}

OutputReorder& LayoutBridge::output_reorder_for(Layout layout) {
  auto& reorder = output_reorders_[static_cast<int>(layout)];
  if (!reorder) reorder.emplace(inner_.get_desc(), make_outer(layout).get_desc());
  return *reorder;
}

void LayoutBridge::bind_input(const Tensor& tensor, Tensor& temporary) {
  const Layout layout = tensor.layout();
  if (chosen_layout_ == layout) {
    inner_.set_data_handle(tensor.raw_data());
    return;
  }
  dnnl::reorder& reorder = input_reorder_for(layout);
  outer_for(layout).set_data_handle(tensor.raw_data());
  bind_buffer(inner_, bytes_, temporary);
  reorder.execute(stream(), outer_for(layout), inner_);
}

void LayoutBridge::bind_same_as(const LayoutBridge& other) {
  inner_.set_data_handle(other.inner_.get_data_handle());
}

void LayoutBridge::bind_output(Tensor& tensor, Tensor& temporary) {
  output_layout_ = writable_layout(tensor, blocked_output_ ? writable_block_ : Layout::plain);
  direct_ = chosen_layout_ == output_layout_;
  if (direct_) {
    inner_.set_data_handle(tensor.raw_data());
    return;
  }
  output_reorder_for(output_layout_);
  outer_for(output_layout_).set_data_handle(tensor.raw_data());
  bind_buffer(inner_, bytes_, temporary);
}

void LayoutBridge::finish_output(Tensor& tensor) {
  if (!direct_) output_reorder_for(output_layout_).execute(inner_, outer_for(output_layout_));
  tensor.set_layout(output_layout_);
}

void LayoutBridge::bind_accumulating_output(Tensor& tensor, Tensor& temporary) {
  BT_CHECK(tensor.layout() == Layout::plain, "an accumulated output must be plain, not {}",
           layout_name(tensor.layout()));
  if (!accumulating_reorder_) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    dnnl::primitive_attr attr;
    attr.set_post_ops(sum);
    accumulated_ = memory(plain_desc_, engine(), DNNL_MEMORY_NONE);
    accumulating_reorder_.emplace(inner_.get_desc(), plain_desc_, attr);
  }
  accumulated_.set_data_handle(tensor.raw_data());
  bind_buffer(inner_, bytes_, temporary);
}

void LayoutBridge::finish_accumulating_output() { accumulating_reorder_->execute(inner_, accumulated_); }

}  // namespace bigtrain::kernels::cpu
