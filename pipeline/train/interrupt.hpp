#pragma once
// Ctrl-C (SIGINT) and SIGTERM during training: the first one asks the trainer to
// stop at the next optimizer-step boundary, write a checkpoint and exit; a second
// one ends the process at once, as if no handler were installed (the previous
// checkpoint stays loadable, as after kill -9).
namespace bigtrain {

// Installs the handlers for SIGINT and SIGTERM (idempotent). The handler only
// records the signal and writes one line to stderr (async-signal-safe).
void install_stop_handlers();
// The default actions again, and forget a recorded signal.
void remove_stop_handlers();

// The first signal received since install_stop_handlers(), or 0.
int stop_signal();

}  // namespace bigtrain
