#pragma once

#include <signal.h>

#include <array>

namespace crucible::util {

// The signals that ask a Crucible process to stop gracefully: SIGTERM, SIGUSR1, SIGINT, and
// SIGHUP (the terminal or ssh session it runs in went away).
inline constexpr std::array<int, 4> kStopSignals = {SIGTERM, SIGUSR1, SIGINT, SIGHUP};

// What a process that a first SIGINT stops gracefully writes to its terminal at once, so that a
// long step (a validation, a checkpoint) is not taken for no answer.
inline constexpr char kInterruptNotice[] =
    "\ninterrupted: stopping after the current step (a batch, a validation or a checkpoint), "
    "with a checkpoint; interrupt again to stop at once, without one\n";

// Writes kInterruptNotice to stderr when stderr is a terminal. For a parent that passes a SIGINT
// on from its main loop (not async-signal-safe).
void notice_interrupt_on_terminal();

// While one lives, `handler` handles every signal of kStopSignals, except SIGHUP while it is
// ignored (nohup; trainer restores that choice at its start when a library's constructor
// replaced it): that choice is kept. The handlers it replaced
// come back when it is destroyed. Requires `handler` to be async-signal-safe.
class StopHandlers {
 public:
  explicit StopHandlers(void (*handler)(int));
  ~StopHandlers();
  StopHandlers(const StopHandlers&) = delete;
  StopHandlers& operator=(const StopHandlers&) = delete;

 private:
  std::array<struct sigaction, kStopSignals.size()> previous_{};
};

}  // namespace crucible::util
