#include "net/tensor_window.hpp"

#include <cstring>

#include "kernels/core/error.hpp"

namespace bigtrain::net {

void copy_window(const Tensor& blocked_or_plain_source, const Window& from, Tensor& destination, std::int64_t to_y,
                 std::int64_t to_x) {
  // Windows are NCHW rows: a blocked activation (a trunk's output on the CPU) is
  // read through its plain form.
  const Tensor source = blocked_or_plain_source.to_plain();
  BT_CHECK(destination.layout() == Layout::plain, "copy_window: destination {} is not in the plain layout",
           destination.describe());
  BT_CHECK(source.rank() == 4 && destination.rank() == 4 && source.dim(0) == destination.dim(0) &&
               source.dim(1) == destination.dim(1) && source.dtype() == destination.dtype(),
           "copy_window: {} and {} are not NCHW tensors of one batch, channel count and dtype", source.describe(),
           destination.describe());
  BT_CHECK(from.height >= 0 && from.width >= 0 && from.y >= 0 && from.x >= 0 &&
               from.y + from.height <= source.dim(2) && from.x + from.width <= source.dim(3) && to_y >= 0 &&
               to_x >= 0 && to_y + from.height <= destination.dim(2) && to_x + from.width <= destination.dim(3),
           "copy_window: window {}x{} at ({}, {}) of {} does not fit at ({}, {}) of {}", from.height, from.width,
           from.y, from.x, source.describe(), to_y, to_x, destination.describe());
  if (from.height == 0 || from.width == 0) return;
  const std::int64_t planes = source.dim(0) * source.dim(1);
  const std::int64_t source_h = source.dim(2), source_w = source.dim(3);
  const std::int64_t dest_h = destination.dim(2), dest_w = destination.dim(3);
  const std::size_t element = dtype_size(source.dtype());
  if (source.device().is_cpu() && destination.device().is_cpu()) {
    const auto* in = static_cast<const char*>(source.raw_data());
    auto* out = static_cast<char*>(destination.raw_data());
    for (std::int64_t plane = 0; plane < planes; ++plane)
      for (std::int64_t row = 0; row < from.height; ++row) {
        const std::int64_t in_offset = (plane * source_h + from.y + row) * source_w + from.x;
        const std::int64_t out_offset = (plane * dest_h + to_y + row) * dest_w + to_x;
        std::memcpy(out + out_offset * element, in + in_offset * element, static_cast<std::size_t>(from.width) * element);
      }
    return;
  }
  const Tensor flat_in = source.reshape({source.numel()});
  Tensor flat_out = destination.reshape({destination.numel()});
  for (std::int64_t plane = 0; plane < planes; ++plane)
    for (std::int64_t row = 0; row < from.height; ++row) {
      const std::int64_t in_offset = (plane * source_h + from.y + row) * source_w + from.x;
      const std::int64_t out_offset = (plane * dest_h + to_y + row) * dest_w + to_x;
      Tensor out_row = flat_out.slice_rows(out_offset, out_offset + from.width);
      out_row.copy_from(flat_in.slice_rows(in_offset, in_offset + from.width));
    }
}

}  // namespace bigtrain::net
