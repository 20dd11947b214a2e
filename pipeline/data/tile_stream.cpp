#include "pipeline/data/tile_stream.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <optional>
#include <tuple>
#include <unordered_map>

#include <oneapi/tbb/flow_graph.h>
#include <oneapi/tbb/task_arena.h>

#include "kernels/core/error.hpp"
#include "pipeline/common/random.hpp"
#include "tiler/tile_reader.hpp"

namespace bigtrain {
namespace {

namespace flow = oneapi::tbb::flow;
using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

struct TileWork {
  std::uint64_t sequence = 0;
  std::size_t job = 0;
  std::shared_ptr<const ImageTiling> plan;
  std::int64_t tile = 0;
  std::int64_t batch_first = 0, batch_size = 0;  // the batch this tile belongs to
  bool last_of_job = false;                       // the job's last tile
  Tensor pixels;  // [C, T, T]
};

// The order in which a job visits an image's tiles: batches of `batch` tiles from
// tile 0 (the last one short), the first `skip` batches left out, the rest in
// ascending or, with `reverse`, descending batch order; ascending tiles within a batch.
class JobOrder {
 public:
  JobOrder(std::int64_t tiles, std::int64_t batch, const StreamJob& job)
      : tiles_(tiles), batch_(batch), reverse_(job.reverse_batches) {
    const std::int64_t batches = (tiles + batch - 1) / batch;
    const std::int64_t skip = job.skip_batches_of ? job.skip_batches_of(tiles) : job.skip_batches;
    first_batch_ = std::min(std::max<std::int64_t>(skip, 0), batches);
    count_ = tiles - std::min(tiles, first_batch_ * batch);
  }
  std::int64_t count() const { return count_; }
  // The tile at `position` in [0, count()).
  std::int64_t tile(std::int64_t position) const {
    if (!reverse_) return first_batch_ * batch_ + position;
    const std::int64_t last_first = ((tiles_ - 1) / batch_) * batch_;
    const std::int64_t last_size = tiles_ - last_first;
    if (position < last_size) return last_first + position;
    const std::int64_t rest = position - last_size;
    return last_first - (rest / batch_ + 1) * batch_ + rest % batch_;
  }

 private:
  std::int64_t tiles_, batch_;
  bool reverse_;
  std::int64_t first_batch_ = 0, count_ = 0;
};

// The first failure wins; everything after it drains without work.
class FailureLatch {
 public:
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  void record(std::exception_ptr error, const std::string& context) {
    std::lock_guard lock(mutex_);
    if (failed_.load()) return;
    error_ = error;
    context_ = context;
    failed_.store(true, std::memory_order_release);
  }
  void rethrow() const {
    if (!failed()) return;
    try {
      std::rethrow_exception(error_);
    } catch (const Error& error) {
      const std::string message = error.what();
      // Tiler errors already name the file; others get the image prepended.
      if (context_.empty() || message.find(context_) != std::string::npos) throw;
      throw Error(fmt::format("{}: {}", context_, message));
    }
  }

 private:
  std::atomic<bool> failed_{false};
  std::mutex mutex_;
  std::exception_ptr error_;
  std::string context_;
};

// One image's plan, made by whichever comes first: the planning node (ahead of the
// stream) or the input node (when the stream reaches the image).
class PlanSlot {
 public:
  // Runs the planner unless another thread already has; true if this call ran it.
  bool make(const TileStream::Planner& planner, std::size_t image) {
    {
      std::lock_guard lock(mutex_);
      if (state_ != State::waiting) return false;
      state_ = State::planning;
    }
    std::shared_ptr<const ImageTiling> plan;
    std::exception_ptr error;
    try {
      // Isolated: a parallel loop inside the planner (the thumbnail, OpenCV) must not
      // pick up the input node's task while waiting, which could then block on this
      // very plan.
      oneapi::tbb::this_task_arena::isolate([&] { plan = std::make_shared<const ImageTiling>(planner(image)); });
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard lock(mutex_);
      plan_ = std::move(plan);
      error_ = error;
      state_ = State::made;
    }
    made_.notify_all();
    return true;
  }
  // The plan, made here if no one has started it, else waited for; rethrows the
  // planner's error.
  std::shared_ptr<const ImageTiling> take(const TileStream::Planner& planner, std::size_t image) {
    make(planner, image);
    std::unique_lock lock(mutex_);
    made_.wait(lock, [&] { return state_ == State::made; });
    if (error_) std::rethrow_exception(error_);
    return plan_;
  }
  void release() {
    std::lock_guard lock(mutex_);
    plan_.reset();
  }

 private:
  enum class State { waiting, planning, made };
  std::mutex mutex_;
  std::condition_variable made_;
  State state_ = State::waiting;
  std::shared_ptr<const ImageTiling> plan_;
  std::exception_ptr error_;
};

}  // namespace

TileStream::TileStream(TileStreamOptions options, Preprocessing preprocessing)
    : options_(options), preprocessing_(std::move(preprocessing)) {
  BT_CHECK(options_.tile_batch > 0, "tile stream: tile_batch must be positive, got {}", options_.tile_batch);
  BT_CHECK(options_.plan_ahead >= 0, "tile stream: plan_ahead must be >= 0, got {}", options_.plan_ahead);
  tiles_in_flight_ = options_.tiles_in_flight > 0 ? options_.tiles_in_flight : 4 * options_.tile_batch;
  // Fewer than two batches in flight would serialise reading and computing (and
  // fewer than one could never complete a batch).
  tiles_in_flight_ = std::max(tiles_in_flight_, 2 * options_.tile_batch);
}

StreamStats TileStream::run(const std::vector<StreamJob>& schedule, const Planner& planner, const Consumer& consumer) {
  StreamStats stats;
  if (schedule.empty()) return stats;
  FailureLatch latch;
  const auto started = Clock::now();

  // Images in the order the schedule first reaches them, each with its plan's slot
  // and how many jobs it still has ahead (its plan is dropped after the last).
  std::vector<std::size_t> images;
  std::unordered_map<std::size_t, std::size_t> position;
  for (const auto& job : schedule)
    if (position.emplace(job.image, images.size()).second) images.push_back(job.image);
  std::vector<PlanSlot> slots(images.size());
  std::vector<std::size_t> jobs_left(images.size(), 0);
  for (const auto& job : schedule) ++jobs_left[position.at(job.image)];

  // Built inside the arena: a flow graph submits its tasks to the arena current when
  // it is constructed (oneTBB attaches to it), so built outside, its reads ran in
  // whatever arena the calling thread had (a fresh default one the first time, the
  // thread's implicit one later) and `threads` limited nothing.
  std::atomic<std::int64_t> in_flight{0}, most_in_flight{0};
  oneapi::tbb::task_arena arena(options_.threads > 0 ? options_.threads : oneapi::tbb::task_arena::automatic);
  arena.execute([&] {
    flow::graph graph;

    // --- planning ahead: serial, so at most one image is planned ahead at a time ---
    flow::function_node<std::size_t, flow::continue_msg> planning(graph, flow::serial, [&](std::size_t slot) {
      if (!latch.failed()) slots[slot].make(planner, images[slot]);
      return flow::continue_msg();
    });
    std::size_t next_to_request = 1;  // slot 0 is planned by the input node at once

    // --- input: serial by construction (an input_node body never runs concurrently) ---
    std::size_t job_index = 0;
    std::int64_t tile_index = 0;  // position in the job's order
    std::uint64_t sequence = 0;
    std::shared_ptr<const ImageTiling> current_plan;
    std::optional<JobOrder> order_of_job;

    flow::input_node<TileWork> input(graph, [&](oneapi::tbb::flow_control& control) -> TileWork {
      while (!latch.failed() && job_index < schedule.size()) {
        const StreamJob& job = schedule[job_index];
        if (tile_index == 0) {
          const std::size_t slot = position.at(job.image);
          for (; options_.plan_ahead > 0 && next_to_request < images.size() &&
                 next_to_request <= slot + static_cast<std::size_t>(options_.plan_ahead);
               ++next_to_request)
            planning.try_put(next_to_request);
          try {
            current_plan = slots[slot].take(planner, job.image);
          } catch (...) {
            latch.record(std::current_exception(), "");
            break;
          }
          if (--jobs_left[slot] == 0) slots[slot].release();  // the batches keep it alive
          order_of_job.emplace(static_cast<std::int64_t>(current_plan->tiles.size()), options_.tile_batch, job);
        }
        if (tile_index < order_of_job->count()) {
          TileWork work;
          work.sequence = sequence++;
          work.job = job_index;
          work.plan = current_plan;
          work.tile = order_of_job->tile(tile_index);
          work.batch_first = (work.tile / options_.tile_batch) * options_.tile_batch;
          work.batch_size = std::min<std::int64_t>(options_.tile_batch,
                                                   static_cast<std::int64_t>(current_plan->tiles.size()) - work.batch_first);
          work.last_of_job = ++tile_index == order_of_job->count();
          return work;
        }
        ++job_index;
        tile_index = 0;
      }
      control.stop();
      return {};
    });

    flow::limiter_node<TileWork, long long> limiter(graph, static_cast<std::size_t>(tiles_in_flight_));

    // --- read + preprocess: parallel ---
    const Preprocessing& preprocessing = preprocessing_;
    flow::function_node<TileWork, TileWork> read(graph, flow::unlimited, [&](TileWork work) -> TileWork {
      const std::int64_t now = in_flight.fetch_add(1) + 1;
      for (std::int64_t most = most_in_flight.load(); now > most && !most_in_flight.compare_exchange_weak(most, now);) {
      }
      if (latch.failed()) return work;
      try {
        const ImageTiling& plan = *work.plan;
        const cv::Rect& rect = plan.tiles[static_cast<std::size_t>(work.tile)];
        cv::Mat pixels = tiler::read_tile(*plan.source, plan.sampling, rect);
        work.pixels = Tensor::empty({preprocessing.channels, rect.height, rect.width});
        preprocess_tile(pixels, preprocessing, mix_seed(plan.augment_seed, static_cast<std::uint64_t>(work.tile)),
                        work.pixels.f32(), plan.full_scale);
      } catch (...) {
        latch.record(std::current_exception(), work.plan->path);
      }
      return work;
    });

    flow::sequencer_node<TileWork> order(graph, [](const TileWork& work) { return work.sequence; });

    // --- batching + compute: serial ---
    Tensor batch;
    std::int64_t batch_first = 0, batch_filled = 0;
    auto idle_since = Clock::now();
    using Release = flow::multifunction_node<TileWork, std::tuple<long long>>;
    Release compute(graph, flow::serial, [&](const TileWork& work, Release::output_ports_type& ports) {
      if (latch.failed() || !work.pixels.defined()) {
        in_flight.fetch_sub(1);
        std::get<0>(ports).try_put(1);
        return;
      }
      const ImageTiling& plan = *work.plan;
      if (batch_filled == 0) {
        batch_first = work.batch_first;
        const Shape& tile_shape = work.pixels.shape();
        batch = Tensor::empty({work.batch_size, tile_shape[0], tile_shape[1], tile_shape[2]});
      }
      BT_CHECK(work.tile == batch_first + batch_filled, "tile stream: tile {} arrived out of order", work.tile);
      std::memcpy(batch.f32() + batch_filled * work.pixels.numel(), work.pixels.f32(), work.pixels.nbytes());
      ++batch_filled;
      ++stats.tiles;
      if (batch_filled < batch.dim(0)) return;
      const auto ready = Clock::now();
      stats.wait_seconds += seconds_between(idle_since, ready);
      TileBatch out;
      out.job = work.job;
      out.image = schedule[work.job].image;
      out.pass = schedule[work.job].pass;
      out.plan = work.plan;
      out.first_tile = batch_first;
      out.last_of_job = work.last_of_job;
      out.pixels = std::move(batch);
      const long long released = batch_filled;
      batch_filled = 0;
      try {
        consumer(out);
      } catch (...) {
        latch.record(std::current_exception(), plan.path);
      }
      ++stats.batches;
      idle_since = Clock::now();
      stats.compute_seconds += seconds_between(ready, idle_since);
      in_flight.fetch_sub(released);
      std::get<0>(ports).try_put(released);
    });

    flow::make_edge(input, limiter);
    flow::make_edge(limiter, read);
    flow::make_edge(read, order);
    flow::make_edge(order, compute);
    flow::make_edge(flow::output_port<0>(compute), limiter.decrementer());

    input.activate();
    graph.wait_for_all();
  });
  latch.rethrow();
  stats.most_tiles_in_flight = most_in_flight.load();
  stats.seconds = seconds_between(started, Clock::now());
  return stats;
}

}  // namespace bigtrain
