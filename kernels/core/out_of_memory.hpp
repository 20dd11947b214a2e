#pragma once
// What an out-of-memory error tells the user: which phase of the run asked (pass 1,
// pass 2, eval, heatmaps, bn calibration), for which tensor, against which cap, with
// the allocator's current and peak figures and what `bigtrain plan` predicted, so
// they can tell a too-small card from a plan that was wrong.
#include <cstddef>
#include <string>

#include "kernels/core/device.hpp"
#include "kernels/core/error.hpp"

namespace bigtrain {

// Labels what the run is doing for out-of-memory messages. Process-wide, not per
// thread: TBB runs the device node on whichever worker is free, while the phase is
// set by the thread that drives the run. Scopes nest; the destructor restores the
// outer label. `label` must outlive the scope (a string literal).
class MemoryPhase {
 public:
  explicit MemoryPhase(const char* label);
  ~MemoryPhase();
  MemoryPhase(const MemoryPhase&) = delete;
  MemoryPhase& operator=(const MemoryPhase&) = delete;
  // "" outside any scope.
  static const char* current();

 private:
  const char* previous_;
};

// The device bytes `bigtrain plan` predicts for the running config (0: unknown),
// quoted by out-of-memory errors. Set by the trainer once it has the plan.
void set_planned_device_bytes(std::size_t bytes);
std::size_t planned_device_bytes();

struct OutOfMemoryInfo {
  Device device;
  std::size_t requested = 0;  // bytes asked for by the tensor
  std::size_t limit = 0;      // device.memory_limit; 0: none
  std::size_t current = 0, peak = 0, reserved = 0;
  std::size_t planned = 0;  // planned_device_bytes() when thrown
  std::string phase;        // MemoryPhase::current() when thrown
  std::string cause;        // "would exceed device.memory_limit" or the system's reason
  std::string tensor;       // "[16,64,128,128] f32"; filled by Tensor::empty
};

class OutOfMemoryError : public Error {
 public:
  explicit OutOfMemoryError(OutOfMemoryInfo info);
  const OutOfMemoryInfo& info() const { return info_; }

 private:
  OutOfMemoryInfo info_;
};

std::string format_out_of_memory(const OutOfMemoryInfo& info);
// "1.50 GiB", "12.0 MiB", "512 B" (pipeline/plan/plan_units.hpp's format, which kernels cannot use).
std::string format_memory_bytes(std::size_t bytes);

}  // namespace bigtrain
