// How spawn hands a child its signals: what reaches it before its program runs is not lost.
#include <signal.h>
#include <sys/wait.h>

#include "catch.h"

#include "launch/process.h"
#include "process.h"

using crucible::launch::environment_with;
using crucible::launch::SignalCatcher;
using crucible::launch::spawn;
using crucible::testing::wait_until;

namespace {

// Waits up to `limit_s` for child `pid` and returns its wait status; -1 (after killing it) when
// it was still running.
int status_within(pid_t pid, double limit_s) {
  int status = 0;
  if (wait_until([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, limit_s)) return status;
  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  return -1;
}

}  // namespace

TEST_CASE("a stop signal sent to a child at once ends it, not its copy of the parent's handler",
          "[launch]") {
  const SignalCatcher catcher;  // the parent's handlers, as a search's or the launcher's
  // Sent as spawn returns, the signal mostly reaches the child between fork and exec, where the
  // handler it inherited would keep it and sleep would run its 30 s.
  for (int i = 0; i < 20; ++i) {
    INFO("child " << i);
    const pid_t pid = spawn({"/bin/sleep", "30"}, environment_with({}), 1, 2, "sleep");
    ::kill(pid, SIGTERM);
    const int status = status_within(pid, 10);
    REQUIRE(status != -1);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGTERM);
  }
  CHECK(SignalCatcher::take() == 0);  // none of them reached the parent
}

TEST_CASE("a hang-up the parent ignores (nohup) stays ignored by its children", "[launch]") {
  struct sigaction ignore = {}, previous = {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGHUP, &ignore, &previous);
  {
    const SignalCatcher catcher;  // keeps nohup's choice
    const pid_t pid = spawn({"/bin/sleep", "30"}, environment_with({}), 1, 2, "sleep");
    ::kill(pid, SIGHUP);
    CHECK(status_within(pid, 0.5) == -1);  // still running after half a second
  }
  ::sigaction(SIGHUP, &previous, nullptr);
}
