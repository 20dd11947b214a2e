#include "pipeline/train/interrupt.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace bigtrain {
namespace {

std::atomic<int> received{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free flag");

void on_stop_signal(int signal) {
  int none = 0;
  if (!received.compare_exchange_strong(none, signal)) {
    // The second signal: the user does not want to wait for the step to finish.
    std::signal(signal, SIG_DFL);
    std::raise(signal);
    return;
  }
  static const char message[] =
      "\nbigtrain: stopping after the current optimizer step and writing a checkpoint "
      "(send the signal again to abort at once)\n";
  const ssize_t ignored = ::write(STDERR_FILENO, message, sizeof(message) - 1);
  (void)ignored;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: reads and writes of the tile stream and checkpoints in progress go
  // on instead of failing with EINTR.
  action.sa_flags = SA_RESTART;
  for (int signal : {SIGINT, SIGTERM}) {
    // A signal the parent chose to ignore stays ignored (a shell starts background
    // jobs with SIGINT ignored, so Ctrl-C in that terminal is not for them).
    struct sigaction current {};
    if (sigaction(signal, nullptr, &current) == 0 && current.sa_handler == SIG_IGN) continue;
    sigaction(signal, &action, nullptr);
  }
}

void remove_stop_handlers() {
  for (int signal : {SIGINT, SIGTERM}) {
    struct sigaction current {};
    if (sigaction(signal, nullptr, &current) == 0 && current.sa_handler == on_stop_signal) std::signal(signal, SIG_DFL);
  }
  received.store(0);
}

int stop_signal() { return received.load(std::memory_order_relaxed); }

}  // namespace bigtrain
