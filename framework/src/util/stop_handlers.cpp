#include "util/stop_handlers.h"

namespace crucible::util {

StopHandlers::StopHandlers(void (*handler)(int)) {
  struct sigaction action = {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  for (size_t i = 0; i < kStopSignals.size(); ++i) {
    sigaction(kStopSignals[i], &action, &previous_[i]);
  }
}

StopHandlers::~StopHandlers() {
  for (size_t i = 0; i < kStopSignals.size(); ++i) {
    sigaction(kStopSignals[i], &previous_[i], nullptr);
  }
}

}  // namespace crucible::util
