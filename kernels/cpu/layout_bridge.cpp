#include "kernels/cpu/layout_bridge.hpp"

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

void LayoutBridge::init(const memory::desc& plain, const memory::desc& chosen, Role role) {
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

void LayoutBridge::bind(const void* data, Tensor& temporary) {
  plain_.set_data_handle(const_cast<void*>(data));
  if (!reordered_) return;
  bind_buffer(inner_, bytes_, temporary);
  if (role_ == Role::input) reorder_.execute(stream(), plain_, inner_);
}

void LayoutBridge::finish() {
  if (reordered_ && role_ == Role::output) reorder_.execute(stream(), inner_, plain_);
}

}  // namespace bigtrain::kernels::cpu
