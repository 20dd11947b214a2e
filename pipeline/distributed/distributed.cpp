#include "pipeline/distributed/distributed.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <omp.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "pipeline/distributed/distributed_mpi.hpp"

namespace bigtrain {
namespace {

// OpenMP sizes every process's team to all the machine's cores, so N ranks on one
// machine would run N teams of `cores` threads on `cores` cores, and their spin-
// waiting barriers collapse: 2 ranks on this 2-core machine trained at 0.12x the
// images/s of one process (perf: 70% of each rank in libgomp's spin loops). Each rank
// takes its share of the cores instead, unless the user chose OMP_NUM_THREADS. The
// compute runs on the main thread, whose team size this sets.
void share_cores_among_local_ranks(const Communicator& comm) {
  if (comm.local_size() <= 1 || std::getenv("OMP_NUM_THREADS") != nullptr) return;
  const int cores = omp_get_num_procs();
  const int share = std::max(1, cores / comm.local_size());
  omp_set_num_threads(share);
  if (comm.is_root())
    spdlog::info("{} ranks share this machine's {} cores: {} OpenMP thread(s) each (set OMP_NUM_THREADS to override)",
                 comm.local_size(), cores, share);
}

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  void broadcast(std::span<std::byte>, int) override {}
  void allreduce_sum(std::span<float>) override {}
  void allreduce_sum(std::span<double>) override {}
  void barrier() override {}
  [[noreturn]] void abort(const std::string& message) override {
    std::fprintf(stderr, "bigtrain: aborting: %s\n", message.c_str());
    std::exit(1);
  }
  std::string description() const override { return "single process"; }
};

SingleProcessCommunicator& single_process() {
  static SingleProcessCommunicator instance;
  return instance;
}

std::unique_ptr<Communicator>& session_communicator() {
  static std::unique_ptr<Communicator> instance;
  return instance;
}

}  // namespace

std::unique_ptr<Communicator> make_single_process_communicator() {
  return std::make_unique<SingleProcessCommunicator>();
}

bool mpi_available() {
#ifdef BIGTRAIN_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool nccl_available() {
#ifdef BIGTRAIN_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

double collective_timeout_seconds() {
  const char* text = std::getenv("BIGTRAIN_COLLECTIVE_TIMEOUT_S");
  if (text == nullptr || *text == '\0') return 600.0;
  char* end = nullptr;
  const double value = std::strtod(text, &end);
  if (end == text || *end != '\0' || value < 0)
    throw Error(fmt::format("BIGTRAIN_COLLECTIVE_TIMEOUT_S={}: expected seconds (a number >= 0; 0 disables the "
                            "watchdog)",
                            text));
  return value;
}

bool launched_by_mpi() {
  // Open MPI's mpirun, PMIx launchers (Open MPI 4+, Slurm), MPICH's hydra / PMI-1.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

DistributedSession::DistributedSession() {
  BT_CHECK(session_communicator() == nullptr, "only one DistributedSession at a time");
  if (!launched_by_mpi()) return;
#ifdef BIGTRAIN_HAVE_MPI
  session_communicator() = make_mpi_communicator();
  share_cores_among_local_ranks(*session_communicator());
  // Ranks on one machine take different GPUs (round robin when there are more ranks
  // than GPUs, which the MPI path over host copies still handles; NCCL refuses two
  // ranks on one device). Set before any model is built: the cuda backend reads it.
  if (const int devices = cuda_device_count(); devices > 0) {
    const Communicator& comm = *session_communicator();
    set_cuda_backend_device(comm.local_rank() % devices);
    spdlog::debug("rank {} (local rank {}): CUDA device {} of {}", comm.rank(), comm.local_rank(),
                  comm.local_rank() % devices, devices);
  }
#else
  // Each of N copies would train alone and write into the same run directory.
  throw Error("started by an MPI launcher, but this bigtrain was built without MPI (install libopenmpi-dev and "
              "re-run cmake); refusing to run N independent copies");
#endif
}

DistributedSession::~DistributedSession() { session_communicator().reset(); }

Communicator& world() {
  if (auto& session = session_communicator()) return *session;
  return single_process();
}

}  // namespace bigtrain
