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

// How a 4-D activation's elements lie in memory. `plain` is NCHW, what every
// backend, test and file sees. blocked8 / blocked16 are oneDNN's nChw8c / nChw16c
// (channels in groups of 8 or 16, the group innermost), the layouts its fast CPU
// convolutions read and write: the CPU backend keeps activations in them from one
// oneDNN op to the next instead of reordering into NCHW and back around every
// convolution (docs/design.md, "Activation layout"). Only tensors whose channel
// count is a multiple of the block are blocked, so a blocked tensor has the same
// size as its plain form and dim-0 slices stay valid. nhwc (channels innermost,
// any channel count) is what oneDNN's AMX bf16 kernels read and write: holding it
// saves a reorder per convolution output there (docs/design.md).
enum class Layout : std::uint8_t { plain, blocked8, blocked16, nhwc };
inline constexpr int kLayoutCount = 4;
const char* layout_name(Layout layout);
int layout_block(Layout layout);  // channels per group: 1 for plain and nhwc

class Storage {
 public:
  Storage(std::size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // The layout belongs to the bytes, so every view of them (dim-0 slices, copies of
  // the handle made before an op wrote them) agrees on it.
  Layout layout() const { return layout_; }
  void set_layout(Layout layout) { layout_ = layout; }

 private:
  void* data_ = nullptr;
  Layout layout_ = Layout::plain;
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

  // Unchecked access for kernels that know the layout, or treat the tensor as a
  // flat array (element-wise ops, optimizers).
  void* raw_data() const;
  template <typename T>
  T* data() const { return static_cast<T*>(raw_data()); }
  // Host float32 access, indexed as NCHW; throws for other devices or dtypes and
  // for blocked tensors (to_plain() first), so code that indexes by hand can never
  // misread a blocked activation.
  float* f32() const;

  Layout layout() const { return storage_ ? storage_->layout() : Layout::plain; }
  // Declares the layout the bytes now hold (an op that wrote them). Blocked needs a
  // 4-D host float tensor spanning its whole storage, channels a multiple of the block.
  void set_layout(Layout layout);
  bool spans_storage() const;
  // The same values in `layout`: this tensor itself when it is already so, else a new one.
  Tensor to_layout(Layout layout) const;
  Tensor to_plain() const { return to_layout(Layout::plain); }
  // Whether this tensor may be blocked in `layout` (shape, dtype, device).
  bool can_block(Layout layout) const;

  // Same storage, new shape with the same element count.
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) along dim 0, sharing storage.
  Tensor slice_rows(std::int64_t begin, std::int64_t end) const;
  // A new tensor with its own storage holding the same values (same device).
  Tensor clone() const;
  // Copies another tensor of the same shape and dtype into this one, across devices
  // too. Values, not bytes: a blocked source lands in this tensor's layout, or this
  // tensor takes the source's layout when it spans its storage.
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

// The layout an op may write `out` in when its inputs are in `wanted`: `wanted` when
// `out` can take it, else the layout `out`'s storage already has (a view into a
// larger tensor cannot change it); the op then brings its inputs to that layout.
Layout writable_layout(const Tensor& out, Layout wanted);

}  // namespace bigtrain
