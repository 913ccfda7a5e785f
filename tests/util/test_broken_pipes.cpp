// util::survive_broken_pipes: what a write to a closed connection does afterwards, in this process
// and in a program it execs.
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>

#include "catch.h"

#include "util/broken_pipes.h"

namespace {

// The handler SIGPIPE has now.
void (*sigpipe_handler())(int) {
  struct sigaction current = {};
  sigaction(SIGPIPE, nullptr, &current);
  return current.sa_handler;
}

}  // namespace

TEST_CASE("after survive_broken_pipes a write to a closed socket fails with EPIPE", "[util]") {
  std::signal(SIGPIPE, SIG_DFL);
  crucible::util::survive_broken_pipes();
  crucible::util::survive_broken_pipes();  // a second call changes nothing
  int fds[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
  close(fds[1]);
  const char byte = 'x';
  errno = 0;
  // Without the handler, this process would end here, killed by SIGPIPE.
  CHECK(write(fds[0], &byte, 1) == -1);
  CHECK(errno == EPIPE);
  close(fds[0]);

  // A program exec'd afterwards meets SIGPIPE's default action again.
  const int status = std::system("kill -s PIPE $$");
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGPIPE);
  std::signal(SIGPIPE, SIG_DFL);
}

TEST_CASE("survive_broken_pipes keeps a SIGPIPE disposition the program chose", "[util]") {
  std::signal(SIGPIPE, SIG_IGN);
  crucible::util::survive_broken_pipes();
  CHECK(sigpipe_handler() == SIG_IGN);
  std::signal(SIGPIPE, SIG_DFL);
  crucible::util::survive_broken_pipes();
  CHECK(sigpipe_handler() != SIG_DFL);
  CHECK(sigpipe_handler() != SIG_IGN);
  std::signal(SIGPIPE, SIG_DFL);
}
