#pragma once

#include <cstdint>
#include <string>

#include "util/stop_handlers.h"

namespace crucible::train {

// The log line of a fit that a signal or a closed console stops at `batches`, "CAUSE:
// checkpointing at batch N and stopping", and whether a log message is one (as the report reads
// trainer.log).
std::string signal_stop_line(const std::string& cause, int64_t batches);
bool is_signal_stop_line(const std::string& message);

// While alive, SIGTERM, SIGUSR1, a first SIGINT and SIGHUP (unless it was ignored at the start,
// as under nohup) only record that a graceful stop was asked; the first SIGINT also writes
// util::kInterruptNotice when `notice` and stderr is a terminal (ranks that Crucible's launcher
// starts write to pipes; under another launcher rank 0 alone should pass `notice`). A second
// SIGINT ends the process at once with exit code 130. The previous handlers come back on
// destruction. One instance at a time.
class StopSignals {
 public:
  explicit StopSignals(bool notice);

  // The signal that asked for a stop, or 0.
  static int requested();

 private:
  util::StopHandlers handlers_;
};

}  // namespace crucible::train
