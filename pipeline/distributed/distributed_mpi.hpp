#pragma once
// The MPI communicator (only in builds with BIGTRAIN_HAVE_MPI). Internal to
// pipeline/distributed/distributed.cpp: everything else uses world().
#include <memory>

#include "pipeline/distributed/distributed.hpp"

namespace bigtrain {

#ifdef BIGTRAIN_HAVE_MPI
// Initialises MPI (MPI_THREAD_MULTIPLE: collectives run on a TBB worker thread and
// the watchdog may abort from its own), starts the watchdog; finalises on destruction.
std::unique_ptr<Communicator> make_mpi_communicator();
#endif

}  // namespace bigtrain
