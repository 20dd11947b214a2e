#pragma once
// The kernel op objects of one layer, one per (backend, shape). Ops build their
// oneDNN primitives / cuDNN plans once in their constructor; a layer sees a few
// shapes at most (the full tile batch, the smaller last batch, a validation batch),
// so a short most-recently-used list is enough and bounds what is held. A
// convolution holds up to twice as many: each shape also fused with its BatchNorm
// (net/conv_bn_fusion.hpp) for the passes that keep nothing.
#include <algorithm>
#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "kernels/core/device.hpp"

namespace bigtrain::net {

template <typename Spec, typename Op>
class OpCache {
 public:
  static constexpr std::size_t kCapacity = 8;

  // The op for (backend, spec), made by make(backend, spec) on a miss.
  template <typename Make>
  Op& get(Backend backend, const Spec& spec, Make&& make) {
    auto hit = std::find_if(entries_.begin(), entries_.end(),
                            [&](const Entry& entry) { return entry.backend == backend && entry.spec == spec; });
    if (hit != entries_.end()) {
      std::rotate(hit, hit + 1, entries_.end());  // most recent last
      return *entries_.back().op;
    }
    if (entries_.size() == kCapacity) entries_.erase(entries_.begin());
    entries_.push_back({backend, spec, make(backend, spec)});
    return *entries_.back().op;
  }

  std::size_t size() const { return entries_.size(); }
  void clear() { entries_.clear(); }

 private:
  struct Entry {
    Backend backend;
    Spec spec;
    std::unique_ptr<Op> op;
  };
  std::vector<Entry> entries_;
};

}  // namespace bigtrain::net
