#include "pipeline/distributed_mpi.hpp"

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
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "kernels/core/error.hpp"

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
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

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

  [[noreturn]] void abort(const std::string& message) override {
    std::fprintf(stderr, "bigtrain rank %d/%d: aborting the job: %s\n", rank_, size_, message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // MPI_Abort does not return; this satisfies [[noreturn]]
  }

  std::string description() const override { return fmt::format("MPI ({}), {} ranks", library_, size_); }

 private:
  // Marks the time a collective started, for the watchdog.
  struct Guard {
    Guard(MpiCommunicator& comm, const char* name) : comm_(comm) {
      comm_.current_name_.store(name);
      comm_.started_ns_.store(Clock::now().time_since_epoch().count());
    }
    ~Guard() { comm_.started_ns_.store(0); }
    MpiCommunicator& comm_;
  };

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
  std::string library_;
  double timeout_ = 0.0;
  std::atomic<Clock::rep> started_ns_{0};
  std::atomic<const char*> current_name_{""};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

}  // namespace bigtrain
#endif  // BIGTRAIN_HAVE_MPI
