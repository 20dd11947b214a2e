#include "kernels/core/out_of_memory.hpp"

#include <atomic>

namespace bigtrain {
namespace {
std::atomic<const char*> phase_label{""};
std::atomic<std::size_t> planned_bytes{0};
}  // namespace

MemoryPhase::MemoryPhase(const char* label) : previous_(phase_label.exchange(label)) {}
MemoryPhase::~MemoryPhase() { phase_label.store(previous_); }
const char* MemoryPhase::current() { return phase_label.load(); }

void set_planned_device_bytes(std::size_t bytes) { planned_bytes.store(bytes); }
std::size_t planned_device_bytes() { return planned_bytes.load(); }

std::string format_memory_bytes(std::size_t bytes) {
  const double value = static_cast<double>(bytes);
  if (bytes >= (std::size_t{1} << 30)) return fmt::format("{:.2f} GiB", value / (1 << 30));
  if (bytes >= (std::size_t{1} << 20)) return fmt::format("{:.1f} MiB", value / (1 << 20));
  if (bytes >= (std::size_t{1} << 10)) return fmt::format("{:.1f} KiB", value / (1 << 10));
  return fmt::format("{} B", bytes);
}

std::string format_out_of_memory(const OutOfMemoryInfo& i) {
  std::string message = fmt::format("out of memory on {}", i.device.str());
  message += fmt::format(" during {}", i.phase.empty() ? "an unlabelled phase" : i.phase);
  message += i.tensor.empty() ? fmt::format(": allocating {}", format_memory_bytes(i.requested))
                              : fmt::format(": allocating tensor {} ({})", i.tensor, format_memory_bytes(i.requested));
  message += fmt::format(" {}", i.cause);
  message += fmt::format("; device.memory_limit {}", i.limit == 0 ? std::string("none") : format_memory_bytes(i.limit));
  message += fmt::format(", in use {}, peak {}, reserved {}", format_memory_bytes(i.current), format_memory_bytes(i.peak),
                         format_memory_bytes(i.reserved));
  message += i.planned == 0 ? std::string(", `bigtrain plan` figure unknown")
                            : fmt::format(", `bigtrain plan` predicted {} for this config", format_memory_bytes(i.planned));
  message += ". Lower train.tile_batch or tiler.tile, or raise device.memory_limit";
  return message;
}

OutOfMemoryError::OutOfMemoryError(OutOfMemoryInfo info)
    : Error(format_out_of_memory(info)), info_(std::move(info)) {}

}  // namespace bigtrain
