#include "pipeline/distributed/gradient_buckets.hpp"

#include "kernels/core/error.hpp"

namespace bigtrain {

std::vector<GradientBucket> bucket_gradients(std::span<const std::size_t> sizes, std::size_t max_elements) {
  BT_CHECK(max_elements > 0, "gradient buckets need a positive size bound");
  std::vector<GradientBucket> buckets;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    // A bucket holding an oversized tensor never fits more: it stays a lone tensor,
    // reduced in place.
    if (!buckets.empty() && buckets.back().elements + sizes[i] <= max_elements) {
      buckets.back().end = i + 1;
      buckets.back().elements += sizes[i];
    } else {
      buckets.push_back({i, i + 1, sizes[i]});
    }
  }
  return buckets;
}

}  // namespace bigtrain
