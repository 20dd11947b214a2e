#include "kernels/core/tensor.hpp"

#include <cstring>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kernels/core/error.hpp"
#include "kernels/core/out_of_memory.hpp"

#ifdef BIGTRAIN_HAVE_CUDA
#include "kernels/cuda/runtime.hpp"
#endif

namespace bigtrain {

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ",")); }

std::int64_t shape_numel(const Shape& shape) {
  return std::accumulate(shape.begin(), shape.end(), std::int64_t{1}, std::multiplies<>());
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  std::int64_t stride = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::plain: return "plain";
    case Layout::blocked8: return "nChw8c";
    case Layout::blocked16: return "nChw16c";
    case Layout::nhwc: return "nhwc";
  }
  return "?";
}

int layout_block(Layout layout) {
  switch (layout) {
    case Layout::plain: return 1;
    case Layout::blocked8: return 8;
    case Layout::blocked16: return 16;
    case Layout::nhwc: return 1;
  }
  return 1;
}

namespace {

// element (n, c, i) of an [N, C, H*W] tensor: plain at (n*C + c)*HW + i, blocked at
// ((n*C/K + c/K)*HW + i)*K + c%K; nhwc is the blocked form with K = C.
template <typename Index>
void for_each_blocked(std::int64_t batch, std::int64_t channels, std::int64_t plane, std::int64_t block,
                      Index&& visit) {
  const std::int64_t groups = channels / block;
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t g = 0; g < groups; ++g)
      for (std::int64_t i = 0; i < plane; ++i)
        for (std::int64_t k = 0; k < block; ++k) {
          const std::int64_t c = g * block + k;
          visit((n * channels + c) * plane + i, ((n * groups + g) * plane + i) * block + k);
        }
}

}  // namespace

Storage::Storage(std::size_t bytes, Device device) : bytes_(bytes), device_(device) {
  data_ = allocator_for(device).allocate(bytes);
}

Storage::~Storage() { allocator_for(device_).deallocate(data_, bytes_); }

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  for (auto extent : shape) BT_CHECK(extent >= 0, "negative extent in shape {}", shape_str(shape));
  Tensor tensor;
  tensor.dtype_ = dtype;
  tensor.strides_ = contiguous_strides(shape);
  tensor.shape_ = std::move(shape);
  try {
    tensor.storage_ = std::make_shared<Storage>(tensor.nbytes(), device);
  } catch (const OutOfMemoryError& error) {
    // The allocator knows bytes, not shapes; the user knows shapes.
    OutOfMemoryInfo info = error.info();
    info.tensor = fmt::format("{} {}", shape_str(tensor.shape_), dtype_name(dtype));
    throw OutOfMemoryError(std::move(info));
  }
  return tensor;
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor tensor = empty(std::move(shape), dtype, device);
  tensor.zero();
  return tensor;
}

Tensor Tensor::from_vector(Shape shape, std::span<const float> values) {
  BT_CHECK(shape_numel(shape) == static_cast<std::int64_t>(values.size()), "shape {} holds {} values, got {}",
           shape_str(shape), shape_numel(shape), values.size());
  Tensor tensor = empty(std::move(shape));
  std::memcpy(tensor.raw_data(), values.data(), values.size_bytes());
  return tensor;
}

std::int64_t Tensor::dim(int axis) const {
  if (axis < 0) axis += rank();
  BT_CHECK(axis >= 0 && axis < rank(), "axis {} out of range for tensor {}", axis, describe());
  return shape_[axis];
}

void* Tensor::raw_data() const {
  BT_CHECK(defined(), "access to an undefined tensor");
  return static_cast<char*>(storage_->data()) + offset_bytes_;
}

float* Tensor::f32() const {
  BT_CHECK(dtype_ == DType::f32 && device().is_cpu(), "expected a host float32 tensor, got {}", describe());
  BT_CHECK(layout() == Layout::plain, "{} is in oneDNN's {} layout; index it after to_plain()", describe(),
           layout_name(layout()));
  return data<float>();
}

bool Tensor::spans_storage() const {
  return defined() && offset_bytes_ == 0 && nbytes() == storage_->bytes();
}

bool Tensor::can_block(Layout layout) const {
  if (layout == Layout::plain) return true;
  return defined() && rank() == 4 && device().is_cpu() && (dtype_ == DType::f32 || dtype_ == DType::bf16) &&
         shape_[1] % layout_block(layout) == 0;
}

void Tensor::set_layout(Layout layout) {
  BT_CHECK(defined(), "set_layout on an undefined tensor");
  if (layout == this->layout()) return;
  BT_CHECK(can_block(layout) && spans_storage(), "{} cannot hold the {} layout (needs a 4-D host tensor spanning its "
           "storage, channels a multiple of {})", describe(), layout_name(layout), layout_block(layout));
  storage_->set_layout(layout);
}

Tensor Tensor::to_layout(Layout target) const {
  const Layout source = layout();
  if (source == target) return *this;
  BT_CHECK(can_block(target) && dtype_ == DType::f32, "cannot convert {} to {}", describe(), layout_name(target));
  Tensor result = empty(shape_, dtype_, device());
  const float* in = static_cast<const float*>(raw_data());
  float* out = static_cast<float*>(result.raw_data());
  const std::int64_t batch = shape_[0], channels = shape_[1], plane = shape_[2] * shape_[3];
  // nhwc is a single block of all channels.
  auto block_of = [channels](Layout layout) { return layout == Layout::nhwc ? channels : layout_block(layout); };
  // Through plain between two non-plain layouts: a network's convolutions all choose
  // one of them (one CPU, one precision), so that happens only at odd edges.
  if (source == Layout::plain) {
    for_each_blocked(batch, channels, plane, block_of(target),
                     [&](std::int64_t plain, std::int64_t blocked) { out[blocked] = in[plain]; });
  } else if (target == Layout::plain) {
    for_each_blocked(batch, channels, plane, block_of(source),
                     [&](std::int64_t plain, std::int64_t blocked) { out[plain] = in[blocked]; });
  } else {
    return to_plain().to_layout(target);
  }
  result.set_layout(target);
  return result;
}

Layout writable_layout(const Tensor& out, Layout wanted) {
  if (out.layout() == wanted || (out.spans_storage() && out.can_block(wanted))) return wanted;
  return out.layout();
}

Tensor Tensor::reshape(Shape shape) const {
  BT_CHECK(layout() == Layout::plain || shape == shape_, "cannot reshape {} ({}) to {}: to_plain() first",
           describe(), layout_name(layout()), shape_str(shape));
  BT_CHECK(shape_numel(shape) == numel(), "cannot reshape {} to {}", describe(), shape_str(shape));
  Tensor view = *this;
  view.strides_ = contiguous_strides(shape);
  view.shape_ = std::move(shape);
  return view;
}

Tensor Tensor::slice_rows(std::int64_t begin, std::int64_t end) const {
  BT_CHECK(rank() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "rows [{}, {}) out of range for {}",
           begin, end, describe());
  Tensor view = *this;
  view.shape_[0] = end - begin;
  view.offset_bytes_ += static_cast<std::size_t>(begin * strides_[0]) * dtype_size(dtype_);
  return view;
}

Tensor Tensor::clone() const {
  Tensor copy = empty(shape_, dtype_, device());
  copy.copy_from(*this);
  return copy;
}

void Tensor::copy_from(const Tensor& source) {
  BT_CHECK(source.shape_ == shape_ && source.dtype_ == dtype_, "copy from {} into {}: shape or dtype differ",
           source.describe(), describe());
  if (nbytes() == 0) return;
  if (source.layout() != layout()) {
    if (spans_storage() && can_block(source.layout())) {
      set_layout(source.layout());
    } else {
      copy_from(source.to_layout(layout()));
      return;
    }
  }
  if (device().is_cpu() && source.device().is_cpu()) {
    std::memcpy(raw_data(), source.raw_data(), nbytes());
    return;
  }
#ifdef BIGTRAIN_HAVE_CUDA
  cuda::copy_bytes(raw_data(), device(), source.raw_data(), source.device(), nbytes());
#else
  throw Error("copy to or from a CUDA tensor in a build without the CUDA backend");
#endif
}

Tensor Tensor::to(Device target) const {
  if (!target.is_cpu() && layout() != Layout::plain) return to_plain().to(target);
  Tensor copy = empty(shape_, dtype_, target);
  copy.copy_from(*this);
  return copy;
}

void Tensor::fill(float value) {
  if (device().is_cpu() && dtype_ == DType::f32) {
    std::fill_n(data<float>(), numel(), value);
    return;
  }
  // Other devices and dtypes: build on the host and copy, which is rare (setup only).
  Tensor host = empty(shape_, DType::f32);
  host.fill(value);
  BT_CHECK(dtype_ == DType::f32, "fill of {} tensors is not supported", dtype_name(dtype_));
  copy_from(host);
}

void Tensor::zero() {
  if (device().is_cpu()) {
    std::memset(raw_data(), 0, nbytes());
    return;
  }
#ifdef BIGTRAIN_HAVE_CUDA
  cuda::zero_bytes(raw_data(), device(), nbytes());
#endif
}

std::vector<float> Tensor::to_vector() const {
  BT_CHECK(dtype_ == DType::f32, "to_vector of a {} tensor", dtype_name(dtype_));
  Tensor host = device().is_cpu() ? to_plain() : to(Device::cpu());
  return std::vector<float>(host.data<float>(), host.data<float>() + numel());
}

std::string Tensor::describe() const {
  if (layout() != Layout::plain)
    return fmt::format("{}{}@{}:{}", dtype_name(dtype_), shape_str(shape_), device().str(), layout_name(layout()));
  return fmt::format("{}{}@{}", dtype_name(dtype_), shape_str(shape_), device().str());
}

}  // namespace bigtrain
