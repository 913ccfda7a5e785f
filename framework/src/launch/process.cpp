#include "launch/process.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>  // environ

#include <atomic>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include <crucible/errors.h>

namespace crucible::launch {
namespace {

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::atomic<int> g_caught{0};
std::atomic<bool> g_asked{false};

void remember_signal(int sig) { g_caught = sig; }
void remember_question(int) { g_asked = true; }

// Forgets a signal an earlier catcher kept; returns the handler to install.
void (*fresh_handler())(int) {
  g_caught = 0;
  g_asked = false;
  return remember_signal;
}

}  // namespace

SignalCatcher::SignalCatcher() : handlers_(fresh_handler()) {
  struct sigaction action = {};
  action.sa_handler = remember_question;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  ::sigaction(util::kWhereSignal, &action, &previous_where_);
}

SignalCatcher::~SignalCatcher() { ::sigaction(util::kWhereSignal, &previous_where_, nullptr); }

int SignalCatcher::take() { return g_caught.exchange(0); }

bool SignalCatcher::take_question() { return g_asked.exchange(false); }

std::vector<std::string> environment_with(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    if (!overrides.count(entry.substr(0, entry.find('=')))) out.push_back(entry);
  }
  for (const auto& [k, v] : overrides) out.push_back(k + "=" + v);
  return out;
}

pid_t spawn(const std::vector<std::string>& command, std::vector<std::string> env, int out_fd,
            int err_fd, const std::string& what, const std::vector<int>& cpus) {
  std::vector<std::string> args = command;
  auto argv = pointers(args);
  auto envp = pointers(env);
  const std::string exec_failed = fmt::format("cannot exec {}: {}\n", what, command.at(0));
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int cpu : cpus) CPU_SET(cpu, &set);
  const pid_t parent = ::getpid();
  // The stop signals wait until the child has dropped the handlers it inherits (see below).
  sigset_t stops, previous;
  sigemptyset(&stops);
  for (const int sig : util::kStopSignals) sigaddset(&stops, sig);
  ::pthread_sigmask(SIG_BLOCK, &stops, &previous);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec.
    // A stop signal that came before exec would run the parent's handler, which keeps it in this
    // copy of the parent's memory, lost at exec: the default action ends the child instead. An
    // ignored one (nohup's SIGHUP) stays ignored.
    for (const int sig : util::kStopSignals) {
      struct sigaction current = {};
      ::sigaction(sig, nullptr, &current);
      if ((current.sa_flags & SA_SIGINFO) != 0 || current.sa_handler != SIG_IGN) {
        struct sigaction fallback = {};
        fallback.sa_handler = SIG_DFL;
        sigemptyset(&fallback.sa_mask);
        ::sigaction(sig, &fallback, nullptr);
      }
    }
    ::sigprocmask(SIG_SETMASK, &previous, nullptr);
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // Not the parent's handler (exec would make it the default action, which ends a process).
    struct sigaction ignore = {};
    ignore.sa_handler = SIG_IGN;
    ::sigaction(util::kWhereSignal, &ignore, nullptr);
    if (::getppid() != parent) ::_exit(127);
    if (!cpus.empty()) ::sched_setaffinity(0, sizeof(set), &set);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(err_fd, STDERR_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    [[maybe_unused]] auto n = ::write(STDERR_FILENO, exec_failed.data(), exec_failed.size());
    ::_exit(127);
  }
  const int fork_error = errno;
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) throw Error(fmt::format("cannot start {}: {}", what, std::strerror(fork_error)));
  ::setpgid(pid, pid);  // also here: no window in which a terminal's signal reaches it
  return pid;
}

std::string describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                       strsignal(WTERMSIG(status)));
  }
  return "ended";
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

}  // namespace crucible::launch
