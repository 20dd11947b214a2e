#include "pipeline/engine/feature_cache.hpp"

#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"

namespace bigtrain {

FeatureCache::FeatureCache(std::string name, std::size_t images, std::int64_t budget_bytes,
                           std::optional<std::size_t> expected)
    : name_(std::move(name)),
      entries_(images),
      budget_bytes_(budget_bytes),
      expected_(expected.value_or(images)),
      abandoned_(budget_bytes <= 0) {}

const FeatureCache::Entry& FeatureCache::at(std::size_t image) const {
  BT_CHECK(image < entries_.size() && entries_[image].features.defined(), "feature cache ({}): image {} is not kept",
           name_, image);
  return entries_[image];
}

void FeatureCache::store(std::size_t image, const Tensor& features, std::shared_ptr<const ImageTiling> plan) {
  if (abandoned_) return;
  BT_CHECK(image < entries_.size(), "feature cache ({}): image {} of {}", name_, image, entries_.size());
  BT_CHECK(features.rank() == 2 && features.dtype() == DType::f32, "feature cache ({}): features must be [N, D] float32",
           name_);
  Entry& entry = entries_[image];
  const std::int64_t size = static_cast<std::int64_t>(features.numel()) * 4;
  const std::int64_t replaced = entry.features.defined() ? static_cast<std::int64_t>(entry.features.numel()) * 4 : 0;
  if (bytes_ - replaced + size > budget_bytes_) {
    spdlog::info("feature cache ({}): the frozen encoder's features outgrow train.feature_cache_mb ({} MiB) after {} "
                 "of {} images; every epoch encodes its tiles again",
                 name_, budget_bytes_ >> 20, stored_, entries_.size());
    entries_.clear();
    entries_.shrink_to_fit();
    bytes_ = 0;
    stored_ = 0;
    abandoned_ = true;
    return;
  }
  if (!entry.features.defined()) ++stored_;
  // Its own storage: H is released, or reused by the allocator, once the image is done.
  entry.features = features.device() == Device::cpu() ? features.to_plain().clone() : features.to(Device::cpu());
  entry.plan = std::move(plan);
  bytes_ += size - replaced;
}

}  // namespace bigtrain
