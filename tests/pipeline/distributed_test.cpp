// The sharding rules of data-parallel training (pipeline/distributed/distributed_training.hpp):
// the ranks' shares of an epoch are disjoint, cover every image once, keep the
// global order, and split every optimizer step (the collectives themselves run
// under mpirun in tests/cli/mpi_train.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/core/error.hpp"
#include "pipeline/distributed/distributed.hpp"
#include "pipeline/distributed/distributed_training.hpp"

namespace bigtrain {
namespace {

std::vector<std::size_t> shuffled_order(std::size_t n) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::reverse(order.begin(), order.end());  // any order that is not the identity
  std::rotate(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n / 3), order.end());
  return order;
}

TEST(ShardEpoch, RanksShareEveryStepWithoutOverlap) {
  for (std::size_t images : {1u, 7u, 10u, 33u}) {
    for (std::int64_t per_step : {1, 2, 4, 5}) {
      for (int ranks : {1, 2, 3, 4}) {
        const auto order = shuffled_order(images);
        const std::size_t steps = (images + static_cast<std::size_t>(per_step) - 1) / static_cast<std::size_t>(per_step);
        std::vector<int> owner(images, -1);
        std::vector<std::int64_t> step_total(steps, 0);
        for (int rank = 0; rank < ranks; ++rank) {
          const EpochShard shard = shard_epoch(order, per_step, rank, ranks);
          ASSERT_EQ(shard.images_per_step.size(), steps) << "every rank takes part in every step";
          ASSERT_EQ(shard.images.size(), shard.positions.size());
          ASSERT_TRUE(std::is_sorted(shard.positions.begin(), shard.positions.end())) << "global order kept";
          std::vector<std::int64_t> counted(steps, 0);
          for (std::size_t i = 0; i < shard.positions.size(); ++i) {
            const std::size_t position = shard.positions[i];
            EXPECT_EQ(shard.images[i], order[position]);
            EXPECT_EQ(owner[position], -1) << "position " << position << " taken twice";
            owner[position] = rank;
            ++counted[position / static_cast<std::size_t>(per_step)];
          }
          EXPECT_EQ(counted, shard.images_per_step);
          for (std::size_t s = 0; s < steps; ++s) {
            step_total[s] += shard.images_per_step[s];
            // Balanced inside each step: shares differ by at most one image.
            EXPECT_LE(shard.images_per_step[s], (per_step + ranks - 1) / ranks);
          }
        }
        EXPECT_TRUE(std::none_of(owner.begin(), owner.end(), [](int o) { return o < 0; })) << "an image was left out";
        for (std::size_t s = 0; s < steps; ++s) {
          const auto expected = std::min<std::int64_t>(per_step, static_cast<std::int64_t>(images) -
                                                                     static_cast<std::int64_t>(s) * per_step);
          EXPECT_EQ(step_total[s], expected) << "step " << s;
        }
      }
    }
  }
}

TEST(ShardEpoch, OneRankTakesTheWholeOrder) {
  const auto order = shuffled_order(9);
  const EpochShard shard = shard_epoch(order, 4, 0, 1);
  EXPECT_EQ(shard.images, order);
  EXPECT_EQ(shard.images_per_step, (std::vector<std::int64_t>{4, 4, 1}));
}

TEST(ShardEpoch, RefusesBadArguments) {
  EXPECT_THROW(shard_epoch({0, 1}, 0, 0, 1), Error);
  EXPECT_THROW(shard_epoch({0, 1}, 2, 2, 2), Error);
  EXPECT_THROW(shard_indices(4, 0, 0), Error);
}

TEST(ShardIndices, RoundRobinCoversEachIndexOnce) {
  EXPECT_EQ(shard_indices(5, 0, 2), (std::vector<std::size_t>{0, 2, 4}));
  EXPECT_EQ(shard_indices(5, 1, 2), (std::vector<std::size_t>{1, 3}));
  EXPECT_TRUE(shard_indices(1, 2, 3).empty());
}

TEST(SingleProcess, CollectivesAreTheIdentity) {
  // Outside mpirun the trainer runs these on world(): they must not change anything.
  Communicator& comm = world();
  ASSERT_EQ(comm.size(), 1);
  std::vector<float> values{1.5f, -2.0f};
  comm.allreduce_sum(std::span<float>(values));
  EXPECT_EQ(values, (std::vector<float>{1.5f, -2.0f}));
  std::vector<int> labels{1};
  std::vector<std::vector<float>> probabilities{{0.25f, 0.75f}};
  std::vector<double> losses{0.3};
  gather_image_results(comm, {0}, 1, 2, labels, probabilities, losses);
  EXPECT_EQ(labels, std::vector<int>{1});
  EXPECT_EQ(sum_over_ranks(comm, 42), 42);
}

}  // namespace
}  // namespace bigtrain
