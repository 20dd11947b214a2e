#pragma once
// Data-parallel training across processes: `mpirun -np N bigtrain run config.yaml`.
//
// A Communicator is the handful of collectives the trainer needs. The process has one
// (world()): a single-process one unless the process was started by an MPI launcher
// in a build that found MPI. MPI is process-wide state (MPI_COMM_WORLD), so the
// communicator is too, rather than something threaded through every constructor.
//
// Failure policy: a collective must never wait forever. MPI launchers kill the job
// when a rank exits without MPI_Finalize (kill -9, a crash); for a rank that hangs,
// a watchdog aborts the whole job when one collective has waited longer than
// BIGTRAIN_COLLECTIVE_TIMEOUT_S seconds (default 600; 0 disables it). A rank that
// fails with an error calls abort() so the others do not wait for it. NCCL work on
// the GPU is waited for by polling, never blocking, under the same timeout; on
// timeout or abort the NCCL communicator is aborted (ncclCommAbort) before the job.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kernels/core/device.hpp"

namespace bigtrain {

// `count` floats in the memory of a CUDA device.
struct DeviceBuffer {
  float* data = nullptr;
  std::size_t count = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank among the processes on this machine (picks this rank's GPU).
  virtual int local_rank() const = 0;
  // How many ranks share this machine (its cores and GPUs).
  virtual int local_size() const = 0;
  // Rank `root`'s bytes replace everyone else's.
  virtual void broadcast(std::span<std::byte> bytes, int root) = 0;
  // Element-wise sum over ranks, in place, identical on every rank afterwards.
  virtual void allreduce_sum(std::span<float> values) = 0;
  virtual void allreduce_sum(std::span<double> values) = 0;
  virtual void barrier() = 0;
  // Element-wise sum over ranks of float buffers that live on CUDA device `device`,
  // in place, on the device (NCCL), in a few bucketed collective calls; ordered after
  // the work already queued on the device's compute stream and finished on return.
  // Every rank calls it at the same point (the first call creates the NCCL
  // communicator). Returns false, touching nothing, when this communicator has no
  // device path (single process, a build without NCCL, BIGTRAIN_NCCL=0): the caller
  // then sums host copies with allreduce_sum.
  virtual bool allreduce_sum_on_device(std::span<const DeviceBuffer> buffers, Device device) { return false; }
  // "NCCL 2.28.9 over 2 ranks" once allreduce_sum_on_device has run; empty before.
  virtual std::string device_description() const { return {}; }
  // Ends every rank of the job with this message (never returns).
  [[noreturn]] virtual void abort(const std::string& message) = 0;
  // "MPI (Open MPI v4.1.4)" or "single process", for the log.
  virtual std::string description() const = 0;

  // Time spent inside allreduce_sum and its volume, since the start (for the log
  // and scripts/bench_mpi: communication time per step).
  struct Stats {
    std::int64_t allreduce_calls = 0;
    std::int64_t allreduce_bytes = 0;
    double allreduce_seconds = 0.0;
  };
  const Stats& stats() const { return stats_; }

  bool is_root() const { return rank() == 0; }
  bool distributed() const { return size() > 1; }

 protected:
  Stats stats_;
};

// The single-process communicator: every collective is the identity.
std::unique_ptr<Communicator> make_single_process_communicator();

// Whether this build can run distributed (found MPI at configure time).
bool mpi_available();
// Whether this build sums CUDA gradients with NCCL (found CUDA, MPI and NCCL).
bool nccl_available();
// BIGTRAIN_COLLECTIVE_TIMEOUT_S (default 600; 0: wait forever); throws on a bad value.
double collective_timeout_seconds();
// Whether an MPI launcher (mpirun, srun with PMI/PMIx) started this process.
bool launched_by_mpi();

// Owns the process's communicator for the lifetime of a command: MPI when launched
// by an MPI launcher (initialises MPI, starts the watchdog), single process
// otherwise. Finalises MPI on destruction. At most one at a time.
class DistributedSession {
 public:
  DistributedSession();
  ~DistributedSession();
  DistributedSession(const DistributedSession&) = delete;
  DistributedSession& operator=(const DistributedSession&) = delete;
};

// The process's communicator (single process outside a DistributedSession).
Communicator& world();

}  // namespace bigtrain
