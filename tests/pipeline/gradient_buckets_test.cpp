// The bucket plan of the GPU gradient allreduce (pipeline/distributed/gradient_buckets.hpp): every
// tensor in exactly one bucket, in order; staged buckets never exceed the staging
// buffer; a tensor larger than a bucket goes alone, in place; few calls for ResNet-50.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <vector>

#include "kernels/core/error.hpp"
#include "pipeline/distributed/gradient_buckets.hpp"

namespace bigtrain {
namespace {

// The invariants any plan must keep, for any sizes and bound.
void expect_valid_plan(const std::vector<std::size_t>& sizes, std::size_t bound) {
  const auto buckets = bucket_gradients(sizes, bound);
  std::size_t next = 0;
  for (const GradientBucket& b : buckets) {
    ASSERT_EQ(b.first, next) << "buckets must cover the tensors in order, without gaps or overlap";
    ASSERT_GT(b.end, b.first) << "no empty bucket";
    const std::size_t summed = std::accumulate(sizes.begin() + static_cast<std::ptrdiff_t>(b.first),
                                               sizes.begin() + static_cast<std::ptrdiff_t>(b.end), std::size_t{0});
    EXPECT_EQ(b.elements, summed);
    if (b.staged()) EXPECT_LE(b.elements, bound) << "a staged bucket must fit the staging buffer";
    next = b.end;
  }
  EXPECT_EQ(next, sizes.size()) << "every tensor in a bucket";
  // Greedy: two neighbouring buckets could not have been one (else calls are wasted).
  for (std::size_t i = 1; i < buckets.size(); ++i)
    EXPECT_GT(buckets[i - 1].elements + sizes[buckets[i].first], bound) << "bucket " << i << " could have joined";
}

TEST(GradientBuckets, SmallTensorsShareOneBucket) {
  const std::vector<std::size_t> sizes{3, 4, 2};
  const auto buckets = bucket_gradients(sizes, 100);
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(buckets[0].first, 0u);
  EXPECT_EQ(buckets[0].end, 3u);
  EXPECT_EQ(buckets[0].elements, 9u);
  EXPECT_TRUE(buckets[0].staged());
}

TEST(GradientBuckets, SplitsAtTheBound) {
  const std::vector<std::size_t> sizes{4, 4, 4, 4, 4};
  const auto buckets = bucket_gradients(sizes, 8);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].elements, 8u);  // exactly the bound still fits
  EXPECT_EQ(buckets[1].elements, 8u);
  EXPECT_EQ(buckets[2].elements, 4u);
  EXPECT_FALSE(buckets[2].staged()) << "a lone tensor is reduced in place";
}

TEST(GradientBuckets, OversizedTensorGoesAloneInPlace) {
  const std::vector<std::size_t> sizes{2, 50, 3, 1};
  const auto buckets = bucket_gradients(sizes, 10);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].end, 1u);
  EXPECT_EQ(buckets[1].first, 1u);
  EXPECT_EQ(buckets[1].end, 2u);
  EXPECT_FALSE(buckets[1].staged());
  EXPECT_EQ(buckets[2].elements, 4u) << "the tensors after it start a new bucket";
  expect_valid_plan(sizes, 10);
}

TEST(GradientBuckets, NoTensorsNoBuckets) {
  EXPECT_TRUE(bucket_gradients(std::vector<std::size_t>{}, 10).empty());
  EXPECT_THROW(bucket_gradients(std::vector<std::size_t>{1}, 0), Error);
}

TEST(GradientBuckets, RandomSizesKeepTheInvariants) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::size_t> sizes(rng() % 40);
    for (auto& s : sizes) s = rng() % 3 == 0 ? 0 : rng() % 300;  // zeros: parameters without elements
    expect_valid_plan(sizes, 1 + rng() % 400);
  }
}

// ResNet-50's 161 parameter tensors (conv weights, BN scale/shift, fc) in their
// real sizes: with the 64 MiB bound of the NCCL path, a step makes 2 calls.
TEST(GradientBuckets, ResNet50TakesTwoCalls) {
  std::vector<std::size_t> sizes{64 * 3 * 7 * 7, 64, 64};
  const int blocks[] = {3, 4, 6, 3};
  std::size_t in = 64;
  for (int stage = 0; stage < 4; ++stage) {
    const std::size_t width = std::size_t{64} << stage, out = width * 4;
    for (int b = 0; b < blocks[stage]; ++b) {
      auto conv_bn = [&](std::size_t weights, std::size_t channels) { sizes.insert(sizes.end(), {weights, channels, channels}); };
      conv_bn(in * width, width);
      conv_bn(width * width * 9, width);
      conv_bn(width * out, out);
      if (b == 0) conv_bn(in * out, out);  // projection shortcut
      in = out;
    }
  }
  sizes.insert(sizes.end(), {1000 * 2048, 1000});
  EXPECT_EQ(sizes.size(), 161u);
  EXPECT_EQ(std::accumulate(sizes.begin(), sizes.end(), std::size_t{0}), 25557032u);
  EXPECT_EQ(bucket_gradients(sizes, kNcclBucketElements).size(), 2u);
  expect_valid_plan(sizes, kNcclBucketElements);
}

}  // namespace
}  // namespace bigtrain
