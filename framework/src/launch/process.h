#pragma once

// Child processes for the launcher and the experiment runner: started in their own process
// group, killed when this process dies, and described by their wait status.

#include <signal.h>
#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "util/crash_report.h"
#include "util/stop_handlers.h"

namespace crucible::launch {

// While one lives, the stop signals of util::kStopSignals sent to this process (SIGTERM,
// SIGUSR1, SIGINT, and SIGHUP unless it was ignored at the start) are caught and kept for take()
// instead of acting, and util::kWhereSignal (a question for the processes this one started) for
// take_question(); the previous handlers come back when it is destroyed. One at a time.
class SignalCatcher {
 public:
  SignalCatcher();
  ~SignalCatcher();
  SignalCatcher(const SignalCatcher&) = delete;
  SignalCatcher& operator=(const SignalCatcher&) = delete;
  // The last signal caught since the previous call, or 0.
  static int take();
  // Whether kWhereSignal came since the previous call.
  static bool take_question();

 private:
  util::StopHandlers handlers_;
  struct sigaction previous_where_ = {};
};

// This process's environment with `overrides` replacing the variables of the same name.
std::vector<std::string> environment_with(const std::map<std::string, std::string>& overrides);

// Forks and execs `command` (a program path and its arguments) with environment `env`, its
// stdout on `out_fd` and its stderr on `err_fd`, in a process group of its own, and with
// PR_SET_PDEATHSIG SIGKILL so that it never outlives this process, and util::kWhereSignal ignored
// until it handles it (a question the parent passes on never ends it). Stop signals
// (util::kStopSignals) that reach the child before the program it runs handles them take their
// default action (it ends), whatever handler this process has, except one this process ignores,
// which stays ignored. When `cpus` is not empty the
// child runs on those CPUs only. A program that cannot be executed exits 127 after the line
// "cannot exec <what>: <program>" on `err_fd`. Returns its pid; throws crucible::Error
// "cannot start <what>: <reason>" when it cannot be forked.
pid_t spawn(const std::vector<std::string>& command, std::vector<std::string> env, int out_fd,
            int err_fd, const std::string& what, const std::vector<int>& cpus = {});

// "exited with code 3", "was killed by signal 9 (Killed)".
std::string describe(int status);

// The exit code of a wait status: its exit code, or 128 + the signal that killed it.
int exit_code_of(int status);

}  // namespace crucible::launch
