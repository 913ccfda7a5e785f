#include "util/broken_pipes.h"

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>

namespace crucible::util {
namespace {

void ignore_signal(int) {}

}  // namespace

void survive_broken_pipes() {
  struct sigaction current = {};
  if (sigaction(SIGPIPE, nullptr, &current) != 0 || current.sa_handler != SIG_DFL ||
      (current.sa_flags & SA_SIGINFO) != 0) {
    return;
  }
  struct sigaction action = {};
  action.sa_handler = ignore_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGPIPE, &action, nullptr);
}

bool reader_gone(int fd, short revents) {
  struct stat st {};
  if ((revents & (POLLERR | POLLHUP)) == 0 || fstat(fd, &st) != 0) return false;
  // A pipe without a reader reports POLLERR; a local stream socket whose peer closed, POLLHUP.
  return S_ISFIFO(st.st_mode) ? (revents & POLLERR) != 0 : S_ISSOCK(st.st_mode);
}

}  // namespace crucible::util
