#include "pipeline/distributed/distributed_mpi.hpp"

#ifdef BIGTRAIN_HAVE_MPI
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"
#include "pipeline/distributed/distributed_nccl.hpp"

namespace bigtrain {
namespace {

using Clock = std::chrono::steady_clock;

void check(int status, const char* what) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  throw Error(fmt::format("{} failed: {}", what, std::string(text, static_cast<std::size_t>(length))));
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    // Errors come back as codes we turn into bigtrain::Error (then abort the job)
    // instead of MPI's default of killing the process without context.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    // The ranks sharing this machine (and its GPUs).
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_),
          "MPI_Comm_split_type");
    MPI_Comm_set_errhandler(node_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(node_, &local_rank_);
    MPI_Comm_size(node_, &local_size_);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(version, &length);
    library_ = std::string(version, static_cast<std::size_t>(length));
    library_ = library_.substr(0, library_.find(','));
    if (provided < MPI_THREAD_MULTIPLE) {
      // Still safe for the collectives (one thread at a time calls them); only the
      // watchdog's MPI_Abort from its own thread leaves the standard's guarantees.
      spdlog::warn("MPI provides thread level {} (< MPI_THREAD_MULTIPLE)", provided);
    }
    timeout_ = collective_timeout_seconds();
    if (timeout_ > 0) watchdog_ = std::thread([this] { watch(); });
  }

  ~MpiCommunicator() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
#ifdef BIGTRAIN_HAVE_NCCL
    nccl_live_.store(nullptr);
    nccl_.reset();
#endif
    MPI_Comm_free(&node_);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  void broadcast(std::span<std::byte> bytes, int root) override {
    Guard guard(*this, "MPI_Bcast");
    for (std::size_t done = 0; done < bytes.size();) {
      const std::size_t count = std::min<std::size_t>(bytes.size() - done, INT_MAX);
      check(MPI_Bcast(bytes.data() + done, static_cast<int>(count), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
      done += count;
    }
  }

  void allreduce_sum(std::span<float> values) override { allreduce(values.data(), values.size(), MPI_FLOAT, 4); }
  void allreduce_sum(std::span<double> values) override { allreduce(values.data(), values.size(), MPI_DOUBLE, 8); }

  void barrier() override {
    Guard guard(*this, "MPI_Barrier");
    check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  }

  bool allreduce_sum_on_device(std::span<const DeviceBuffer> buffers, Device device) override {
#ifdef BIGTRAIN_HAVE_NCCL
    if (!device_path_decided_) {
      use_nccl_ = decide_device_path(device);
      device_path_decided_ = true;
    }
    if (!use_nccl_) return false;
    if (!nccl_) {
      nccl_ = std::make_unique<NcclCommunicator>(*this, device, timeout_);
      nccl_live_.store(nccl_.get());
    }
    BT_CHECK(device == nccl_->device(), "gradients on {}, but this rank's NCCL communicator is on {}", device.str(),
             nccl_->device().str());
    const auto started = Clock::now();
    std::size_t bytes = 0;
    for (const DeviceBuffer& b : buffers) bytes += b.count * sizeof(float);
    nccl_->allreduce_sum(buffers);
    stats_.allreduce_calls += 1;
    stats_.allreduce_bytes += static_cast<std::int64_t>(bytes);
    stats_.allreduce_seconds += std::chrono::duration<double>(Clock::now() - started).count();
    return true;
#else
    return false;
#endif
  }

  std::string device_description() const override {
#ifdef BIGTRAIN_HAVE_NCCL
    if (nccl_) return nccl_->description();
#endif
    return {};
  }

  [[noreturn]] void abort(const std::string& message) override {
#ifdef BIGTRAIN_HAVE_NCCL
    // Releases this rank's NCCL resources and fails its peers' pending NCCL work
    // rather than leaving them to their timeouts (MPI_Abort kills the processes, but
    // a launcher may take a while to reach every node).
    if (NcclCommunicator* nccl = nccl_live_.load()) nccl->abort();
#endif
    std::fprintf(stderr, "bigtrain rank %d/%d: aborting the job: %s\n", rank_, size_, message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // MPI_Abort does not return; this satisfies [[noreturn]]
  }

  std::string description() const override { return fmt::format("MPI ({}), {} ranks", library_, size_); }

 private:
  // Marks the time a collective started, for the watchdog. (NCCL waits are not
  // marked: NcclCommunicator polls them under the same timeout itself.)
  struct Guard {
    Guard(MpiCommunicator& comm, const char* name) : comm_(comm) {
      comm_.current_name_.store(name);
      comm_.started_ns_.store(Clock::now().time_since_epoch().count());
    }
    ~Guard() { comm_.started_ns_.store(0); }
    MpiCommunicator& comm_;
  };

#ifdef BIGTRAIN_HAVE_NCCL
  // Whether every rank can sum on its GPU with NCCL; the same answer on every rank
  // (one collective decision), since a rank on NCCL and one on MPI would never meet.
  // NCCL needs one GPU per rank: ranks sharing a machine must have different
  // devices, compared by PCI bus id because each may see its own
  // CUDA_VISIBLE_DEVICES. BIGTRAIN_NCCL=0 chooses MPI over host copies.
  bool decide_device_path(Device device) {
    const char* choice = std::getenv("BIGTRAIN_NCCL");
    const bool wanted = choice == nullptr || std::string(choice) != "0";
    std::string reason = wanted ? "" : "BIGTRAIN_NCCL=0";
    Guard guard(*this, "choosing the gradient allreduce path");
    int local_size = 1;
    MPI_Comm_size(node_, &local_size);
    constexpr int kIdBytes = 32;
    std::string mine = cuda_bus_id(device);
    mine.resize(kIdBytes, '\0');
    std::vector<char> all(static_cast<std::size_t>(local_size) * kIdBytes);
    check(MPI_Allgather(mine.data(), kIdBytes, MPI_CHAR, all.data(), kIdBytes, MPI_CHAR, node_), "MPI_Allgather");
    for (int r = 0; r < local_size && reason.empty(); ++r)
      if (r != local_rank_ && std::equal(mine.begin(), mine.end(), all.begin() + r * kIdBytes))
        reason = fmt::format("local ranks {} and {} share the GPU {} (NCCL needs one GPU per rank)", local_rank_, r,
                             mine.c_str());
    int everyone_can = reason.empty() ? 1 : 0;
    check(MPI_Allreduce(MPI_IN_PLACE, &everyone_can, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
    if (everyone_can == 0)
      spdlog::warn("gradient allreduce on the GPU: NCCL not used ({}); MPI sums host copies instead",
                   reason.empty() ? "another rank cannot" : reason);
    return everyone_can == 1;
  }
#endif

  void allreduce(void* data, std::size_t count, MPI_Datatype type, std::size_t element_bytes) {
    const auto started = Clock::now();
    {
      Guard guard(*this, "MPI_Allreduce");
      auto* bytes = static_cast<std::byte*>(data);
      for (std::size_t done = 0; done < count;) {
        const std::size_t n = std::min<std::size_t>(count - done, INT_MAX);
        check(MPI_Allreduce(MPI_IN_PLACE, bytes + done * element_bytes, static_cast<int>(n), type, MPI_SUM,
                            MPI_COMM_WORLD),
              "MPI_Allreduce");
        done += n;
      }
    }
    stats_.allreduce_calls += 1;
    stats_.allreduce_bytes += static_cast<std::int64_t>(count * element_bytes);
    stats_.allreduce_seconds += std::chrono::duration<double>(Clock::now() - started).count();
  }

  void watch() {
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stopping_; })) {
      const auto started = started_ns_.load();
      if (started == 0) continue;
      const double waited =
          std::chrono::duration<double>(Clock::now().time_since_epoch() - Clock::duration(started)).count();
      if (waited < timeout_) continue;
      abort(fmt::format("{} has waited {:.0f} s for the other ranks (BIGTRAIN_COLLECTIVE_TIMEOUT_S={:.0f}): a rank "
                        "hangs or died",
                        current_name_.load(), waited, timeout_));
    }
  }

  int rank_ = 0;
  int size_ = 1;
  MPI_Comm node_ = MPI_COMM_NULL;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::string library_;
  double timeout_ = 0.0;
  std::atomic<Clock::rep> started_ns_{0};
  std::atomic<const char*> current_name_{""};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread watchdog_;
#ifdef BIGTRAIN_HAVE_NCCL
  bool device_path_decided_ = false;
  bool use_nccl_ = false;
  std::unique_ptr<NcclCommunicator> nccl_;
  std::atomic<NcclCommunicator*> nccl_live_{nullptr};  // for abort() from the watchdog thread
#endif
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

}  // namespace bigtrain
#endif  // BIGTRAIN_HAVE_MPI
