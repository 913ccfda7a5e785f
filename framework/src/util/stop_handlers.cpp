#include "util/stop_handlers.h"

#include <unistd.h>

#include <iostream>

namespace crucible::util {

void notice_interrupt_on_terminal() {
  if (::isatty(STDERR_FILENO) == 1) std::cerr << kInterruptNotice << std::flush;
}

StopHandlers::StopHandlers(void (*handler)(int)) {
  struct sigaction action = {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  for (size_t i = 0; i < kStopSignals.size(); ++i) {
    sigaction(kStopSignals[i], nullptr, &previous_[i]);
    const bool nohup = kStopSignals[i] == SIGHUP && previous_[i].sa_handler == SIG_IGN &&
                       (previous_[i].sa_flags & SA_SIGINFO) == 0;
    if (!nohup) sigaction(kStopSignals[i], &action, nullptr);
  }
}

StopHandlers::~StopHandlers() {
  for (size_t i = 0; i < kStopSignals.size(); ++i) {
    sigaction(kStopSignals[i], &previous_[i], nullptr);
  }
}

}  // namespace crucible::util
