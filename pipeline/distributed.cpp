#include "pipeline/distributed.hpp"

#include <cstdlib>
#include <cstdio>

#include "kernels/core/error.hpp"
#include "pipeline/distributed_mpi.hpp"

namespace bigtrain {
namespace {

class SingleProcessCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
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
