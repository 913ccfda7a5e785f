#include <signal.h>

#include "cli.h"

namespace {

// Whether SIGHUP was ignored when this program was executed (nohup). Recorded before any shared
// library's constructor runs: some replace SIGHUP's disposition there (UCX, which Debian 13's
// LibTorch loads through Open MPI, installs its debug-signal handler on SIGHUP), and nohup's
// choice must survive them.
bool g_hangup_ignored_at_exec = false;

void record_hangup_disposition(int, char**, char**) {
  struct sigaction action = {};
  g_hangup_ignored_at_exec = sigaction(SIGHUP, nullptr, &action) == 0 &&
                             (action.sa_flags & SA_SIGINFO) == 0 && action.sa_handler == SIG_IGN;
}

// Run by the dynamic loader before the constructors of every shared library (executables only).
using PreinitFunction = void (*)(int, char**, char**);
__attribute__((section(".preinit_array"), used)) const PreinitFunction g_record_hangup =
    record_hangup_disposition;

}  // namespace

int main(int argc, char** argv) {
  if (g_hangup_ignored_at_exec) ::signal(SIGHUP, SIG_IGN);
  // A launcher asks a rank that stopped responding what it is doing with SIGUSR2: a fit answers
  // (util::CrashReports); anywhere else the question must not end the process, as by default.
  struct sigaction where = {};
  if (sigaction(SIGUSR2, nullptr, &where) == 0 && (where.sa_flags & SA_SIGINFO) == 0 &&
      where.sa_handler == SIG_DFL) {
    ::signal(SIGUSR2, SIG_IGN);
  }
  return crucible::cli::run(std::vector<std::string>(argv + 1, argv + argc));
}
