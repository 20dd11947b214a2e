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
  return data<float>();
}

Tensor Tensor::reshape(Shape shape) const {
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
  Tensor host = device().is_cpu() ? *this : to(Device::cpu());
  return std::vector<float>(host.data<float>(), host.data<float>() + numel());
}

std::string Tensor::describe() const {
  return fmt::format("{}{}@{}", dtype_name(dtype_), shape_str(shape_), device().str());
}

}  // namespace bigtrain
