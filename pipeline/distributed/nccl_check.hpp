#pragma once
// NCCL's status check, next to the CUDA ones (kernels/cuda/check.hpp): it lives in
// pipeline because only the pipeline links NCCL. Builds with BIGTRAIN_HAVE_NCCL only.
#include <nccl.h>

#include "kernels/cuda/check.hpp"

// Communicators here are non-blocking (so a dead peer cannot hang a call): a call may
// return ncclInProgress, meaning "continues in the background"; the caller then polls
// ncclCommGetAsyncError for its outcome (NcclCommunicator::wait_ready).
#define BT_NCCL_CHECK(call)                                                                        \
  do {                                                                                             \
    ncclResult_t bt_status_ = (call);                                                              \
    if (bt_status_ != ncclSuccess && bt_status_ != ncclInProgress)                                 \
      ::bigtrain::cuda::raise_status("NCCL", #call, ncclGetErrorString(bt_status_), __FILE__, __LINE__); \
  } while (0)
