#pragma once

#include <signal.h>

#include <array>

namespace crucible::util {

// The signals that ask a Crucible process to stop gracefully: SIGTERM, SIGUSR1 and SIGINT.
inline constexpr std::array<int, 3> kStopSignals = {SIGTERM, SIGUSR1, SIGINT};

// While one lives, `handler` handles every signal of kStopSignals; the handlers it replaced come
// back when it is destroyed. Requires `handler` to be async-signal-safe.
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
