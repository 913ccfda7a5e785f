#include "train/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace crucible::train {

namespace {

std::atomic<int> g_requested{0};
std::atomic<int> g_interrupts{0};
struct sigaction g_previous[3];
constexpr int kSignals[3] = {SIGTERM, SIGUSR1, SIGINT};

void on_signal(int sig) {
  if (sig == SIGINT && g_interrupts.fetch_add(1) >= 1) {
    static const char msg[] = "\ninterrupted twice: stopping now, without a checkpoint\n";
    [[maybe_unused]] auto n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(130);
  }
  int expected = 0;
  g_requested.compare_exchange_strong(expected, sig);
}

}  // namespace

StopSignals::StopSignals() {
  g_requested = 0;
  g_interrupts = 0;
  struct sigaction action = {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &action, &g_previous[i]);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
}

int StopSignals::requested() { return g_requested.load(); }

}  // namespace crucible::train
