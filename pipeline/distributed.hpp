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
// fails with an error calls abort() so the others do not wait for it.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace bigtrain {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Rank `root`'s bytes replace everyone else's.
  virtual void broadcast(std::span<std::byte> bytes, int root) = 0;
  // Element-wise sum over ranks, in place, identical on every rank afterwards.
  virtual void allreduce_sum(std::span<float> values) = 0;
  virtual void allreduce_sum(std::span<double> values) = 0;
  virtual void barrier() = 0;
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
