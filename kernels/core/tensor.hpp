#pragma once
// A contiguous n-dimensional array on one device. Shape and strides are explicit
// (in elements); storage is shared, so views and dim-0 slices (a tile batch out of
// a larger batch) cost nothing. Activations are NCHW, weights OIHW, as in PyTorch.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/core/allocator.hpp"
#include "kernels/core/device.hpp"

namespace bigtrain {

using Shape = std::vector<std::int64_t>;
std::string shape_str(const Shape& shape);
std::int64_t shape_numel(const Shape& shape);

class Storage {
 public:
  Storage(std::size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  Device device_;
};

class Tensor {
 public:
  Tensor() = default;
  static Tensor empty(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  static Tensor zeros(Shape shape, DType dtype = DType::f32, Device device = Device::cpu());
  // A host float32 tensor holding `values` (tests and small constants).
  static Tensor from_vector(Shape shape, std::span<const float> values);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int rank() const { return static_cast<int>(shape_.size()); }
  std::int64_t dim(int axis) const;
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu(); }

  void* raw_data() const;
  template <typename T>
  T* data() const { return static_cast<T*>(raw_data()); }
  // Host float32 access with a check; throws for other devices or dtypes.
  float* f32() const;

  // Same storage, new shape with the same element count.
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) along dim 0, sharing storage.
  Tensor slice_rows(std::int64_t begin, std::int64_t end) const;
  // A new tensor with its own storage holding the same values (same device).
  Tensor clone() const;
  // Copies another tensor of the same shape and dtype into this one, across devices too.
  void copy_from(const Tensor& source);
  Tensor to(Device device) const;
  void fill(float value);
  void zero();
  std::vector<float> to_vector() const;  // copies to host as float32

  std::string describe() const;  // "float32[8,64,56,56]@cpu"

 private:
  std::shared_ptr<Storage> storage_;
  std::size_t offset_bytes_ = 0;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::f32;
};

Shape contiguous_strides(const Shape& shape);

}  // namespace bigtrain
