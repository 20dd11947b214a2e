#pragma once
// A frozen encoder's tile features, kept from the first epoch (CLAM precomputes
// them once per slide; here they are kept for one run). With train.encoder_lr_scale
// 0 and frozen BatchNorm or GroupNorm, and inputs that do not change between epochs
// (no augmentation, every kept tile read), pass 1 computes the same H [N, D] for an
// image every epoch: later epochs train the aggregator and head from the kept H
// without reading or encoding a tile, which is most of such an epoch's time.
//
// A split is kept whole or not at all: an epoch either reads every image or none, so
// its order and its tile batches are those of an epoch without the cache, and the
// weights come out bit-identical. When the split's features outgrow the budget the
// cache gives up for the run and says so (train.feature_cache_mb).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernels/core/tensor.hpp"
#include "pipeline/data/image_tiling.hpp"

namespace bigtrain {

class FeatureCache {
 public:
  struct Entry {
    Tensor features;                            // host [N, D], float32
    std::shared_ptr<const ImageTiling> plan;    // the tiles the rows belong to (diagnostics)
  };

  // `name` (the split) for messages; `images`: the split's size; `expected`: how many
  // of them this process reads (its shard of a distributed evaluation; default all).
  FeatureCache(std::string name, std::size_t images, std::int64_t budget_bytes,
               std::optional<std::size_t> expected = std::nullopt);

  // Every image this process reads is in: an epoch can run from the cache alone.
  bool complete() const { return !abandoned_ && stored_ == expected_; }
  bool abandoned() const { return abandoned_; }
  const Entry& at(std::size_t image) const;
  // Keeps a copy of `features` (any device) for `image`; past the budget drops
  // everything and refuses from then on. Storing an image twice replaces it.
  void store(std::size_t image, const Tensor& features, std::shared_ptr<const ImageTiling> plan);
  std::int64_t bytes() const { return bytes_; }
  std::size_t images() const { return stored_; }

 private:
  std::string name_;
  std::vector<Entry> entries_;
  std::int64_t budget_bytes_;
  std::int64_t bytes_ = 0;
  std::size_t expected_ = 0;
  std::size_t stored_ = 0;
  bool abandoned_ = false;
};

}  // namespace bigtrain
