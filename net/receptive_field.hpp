#pragma once
// Which input positions a layer's output position depends on, per axis, for
// streaming the trunk over an image tile by tile (net/streaming.hpp). Output
// position o of a layer reads input positions [stride*o - before, stride*o + after]
// (positions outside the map are its zero padding): a convolution with kernel k,
// stride s, padding p and dilation d has before = p, after = d*(k-1) - p.
#include <cstdint>

namespace bigtrain::net {

struct AxisField {
  std::int64_t stride = 1;
  std::int64_t before = 0, after = 0;

  static AxisField of_window(int kernel, int stride, int padding, int dilation = 1) {
    return {stride, padding, std::int64_t{dilation} * (kernel - 1) - padding};
  }
  // This layer's field followed by `next` (the layer reading this one's output):
  // next's window [s'o - b', s'o + a'] maps to [s(s'o - b') - b, s(s'o + a') + a].
  AxisField then(const AxisField& next) const {
    return {stride * next.stride, before + stride * next.before, after + stride * next.after};
  }
  friend bool operator==(const AxisField&, const AxisField&) = default;
};

struct ReceptiveField {
  AxisField y, x;

  static ReceptiveField identity() { return {}; }
  static ReceptiveField of_window(int kernel_h, int kernel_w, int stride_h, int stride_w, int pad_h, int pad_w,
                                  int dilation_h = 1, int dilation_w = 1) {
    return {AxisField::of_window(kernel_h, stride_h, pad_h, dilation_h),
            AxisField::of_window(kernel_w, stride_w, pad_w, dilation_w)};
  }
  ReceptiveField then(const ReceptiveField& next) const { return {y.then(next.y), x.then(next.x)}; }
  friend bool operator==(const ReceptiveField&, const ReceptiveField&) = default;
};

}  // namespace bigtrain::net
