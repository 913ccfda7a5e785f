#include "train/stop_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>

namespace crucible::train {

namespace {

std::atomic<int> g_requested{0};
std::atomic<int> g_interrupts{0};
std::atomic<bool> g_on_terminal{false};  // stderr is a terminal: a person reads it

void on_signal(int sig) {
  if (sig == SIGINT && g_interrupts.fetch_add(1) >= 1) {
    static const char msg[] = "\ninterrupted twice: stopping now, without a checkpoint\n";
    [[maybe_unused]] auto n = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(130);
  }
  if (sig == SIGINT && g_on_terminal.load()) {
    [[maybe_unused]] auto n =
        write(STDERR_FILENO, util::kInterruptNotice, sizeof(util::kInterruptNotice) - 1);
  }
  int expected = 0;
  g_requested.compare_exchange_strong(expected, sig);
}

// Forgets what an earlier instance recorded; returns the handler to install.
void (*fresh_handler(bool notice))(int) {
  g_requested = 0;
  g_interrupts = 0;
  g_on_terminal = notice && ::isatty(STDERR_FILENO) == 1;
  return on_signal;
}

}  // namespace

StopSignals::StopSignals(bool notice) : handlers_(fresh_handler(notice)) {}

int StopSignals::requested() { return g_requested.load(); }

std::string signal_stop_line(const std::string& cause, int64_t batches) {
  return cause + ": checkpointing at batch " + std::to_string(batches) + " and stopping";
}

bool is_signal_stop_line(const std::string& message) {
  const std::string middle = ": checkpointing at batch ", end = " and stopping";
  return message.find(middle) != std::string::npos && message.size() > end.size() &&
         message.compare(message.size() - end.size(), end.size(), end) == 0;
}

}  // namespace crucible::train
