#pragma once
// What data-parallel training does with the Communicator (see distributed.hpp).
//
// Equivalence with one process: every rank walks the same seeded global image order;
// optimizer step k covers global positions [k*images_per_step, (k+1)*images_per_step)
// and rank r trains the positions p of that step with p % size == r. Each image's
// loss keeps the GLOBAL scale 1/images_per_step, so the allreduce-SUM of the ranks'
// gradients is the single-process gradient of that step, up to the order of the
// float additions. All randomness is keyed by (seed, epoch, image), not by rank.
//
// BatchNorm running statistics are not gradients: each rank updates its own from
// its own tiles, and they are averaged across ranks at the end of every training
// epoch (before validation and the checkpoint), so all ranks and the checkpoint hold
// one set. They are not equal to a single process's (an exponential average over a
// different sequence of batches), as with PyTorch DDP's default. num_batches_tracked
// is rank 0's (broadcast with the weights at the start of every run).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "net/parameter.hpp"
#include "pipeline/distributed/distributed.hpp"

namespace bigtrain {

struct EpochShard {
  std::vector<std::size_t> images;            // this rank's images, in global order
  std::vector<std::size_t> positions;         // their positions in the global order
  std::vector<std::int64_t> images_per_step;  // this rank's image count of each optimizer step (may be 0)
};

// Splits the epoch's global `order` into optimizer steps of `images_per_step`
// images and takes this rank's share of each.
EpochShard shard_epoch(const std::vector<std::size_t>& order, std::int64_t images_per_step, int rank, int ranks);
inline EpochShard shard_epoch(const std::vector<std::size_t>& order, std::int64_t images_per_step,
                              const Communicator& comm) {
  return shard_epoch(order, images_per_step, comm.rank(), comm.size());
}

// Indices 0..count-1 that this rank evaluates (round robin: balanced to one image).
std::vector<std::size_t> shard_indices(std::size_t count, int rank, int ranks);
inline std::vector<std::size_t> shard_indices(std::size_t count, const Communicator& comm) {
  return shard_indices(count, comm.rank(), comm.size());
}

// Rank 0's parameter values, buffers and counters replace everyone's.
void broadcast_state(Communicator& comm, const std::vector<net::StateRefs>& state);

// Sums the gradients of `params` over ranks once per optimizer step. On the CPU:
// ONE flat MPI allreduce. On a GPU, in builds with NCCL: on the device, a few
// bucketed ncclAllReduce calls (Communicator::allreduce_sum_on_device); without
// NCCL, the flat MPI allreduce of host copies. Logs the path on its first step.
class GradientAllreduce {
 public:
  explicit GradientAllreduce(std::vector<net::Parameter*> params);
  void sum(Communicator& comm);
  std::size_t bytes() const { return elements_ * sizeof(float); }

 private:
  bool sum_on_device(Communicator& comm);

  std::vector<net::Parameter*> params_;
  std::size_t elements_ = 0;
  std::vector<float> flat_;  // the host path's buffer, allocated on its first step
  bool logged_path_ = false;
};

// Averages BatchNorm running statistics (every float buffer) over ranks.
void average_buffers(Communicator& comm, const std::vector<net::StateRefs>& state);

// Per-image results of a sharded pass, put back in global order on every rank:
// on entry labels/probabilities/losses hold this rank's images (positions[i] is the
// global position of entry i); on return they hold all `total` images by position.
void gather_image_results(Communicator& comm, const std::vector<std::size_t>& positions, std::size_t total,
                          std::size_t num_classes, std::vector<int>& labels,
                          std::vector<std::vector<float>>& probabilities, std::vector<double>& losses);

std::int64_t sum_over_ranks(Communicator& comm, std::int64_t value);

// When BIGTRAIN_WEIGHTS_DIGEST_DIR is set, writes <dir>/weights.rank<r>.txt: a 64-bit
// FNV-1a hash of every parameter and buffer (the test that all ranks hold identical
// weights compares them).
void write_weights_digest_if_asked(const Communicator& comm, const std::vector<net::StateRefs>& state);

}  // namespace bigtrain
