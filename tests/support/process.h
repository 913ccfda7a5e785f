#pragma once

// Helpers for tests that run real commands and need scratch directories.

#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "files.h"
#include "free_port.h"
#include "util/file_system.h"

namespace crucible::testing {

namespace util = crucible::util;

#ifdef CRUCIBLE_BIN_DIR
// The `trainer` this build made.
inline const std::string kTrainer = std::string(CRUCIBLE_BIN_DIR) + "/trainer";
#endif
#ifdef CRUCIBLE_SOURCE_DIR
// The repository's experiment files.
inline const std::string kConfigs = std::string(CRUCIBLE_SOURCE_DIR) + "/configs";
#endif
#ifdef CRUCIBLE_PYTHON
// The Python that imports torch, which the tests read Crucible's files with.
inline const std::string kPython = CRUCIBLE_PYTHON;
#endif

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// Runs `command` through /bin/sh and captures its output and exit code.
inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// Runs `command` through /bin/sh with its standard streams on a new pseudo-terminal (isatty holds
// in it, as for a person's shell), and captures what it writes there, the terminal's "\r\n" read
// as "\n", and its exit code. A command still holding the terminal after `limit` is killed with
// its process group (SIGKILL), the terminal read for at most 5 s more, and the output ends with a
// line saying so.
inline CommandResult run_on_terminal(const std::string& command,
                                     std::chrono::seconds limit = std::chrono::seconds(300)) {
  CommandResult r;
  int terminal = -1;
  const pid_t pid = ::forkpty(&terminal, nullptr, nullptr, nullptr);
  if (pid < 0) return r;
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  auto deadline = std::chrono::steady_clock::now() + limit;
  bool timed_out = false;
  std::array<char, 4096> buf{};
  for (;;) {  // until EIO: every process that had the terminal open has closed it
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd ready{terminal, POLLIN, 0};
    const int polled = left.count() > 0 ? ::poll(&ready, 1, static_cast<int>(left.count())) : 0;
    if (polled < 0 && errno == EINTR) continue;
    if (polled == 0) {
      if (timed_out) break;  // a process outside the group still holds the terminal
      timed_out = true;
      ::kill(-pid, SIGKILL);  // forkpty made the shell a process-group leader
      deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      continue;
    }
    const ssize_t n = ::read(terminal, buf.data(), buf.size());
    if (n > 0) {
      r.output.append(buf.data(), static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(terminal);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  for (size_t at; (at = r.output.find("\r\n")) != std::string::npos;) r.output.erase(at, 1);
  if (timed_out)
    r.output += "\n[run_on_terminal: killed after " + std::to_string(limit.count()) + " s]\n";
  return r;
}

// Runs `command` (no double quotes in it) through bash with its stdout read by sed up to the
// first line matching `pattern` (a sed regular expression without '/'), which sed prints before
// it ends: the command's console reader goes away there. Returns the output of both and, as
// pipefail gives it, the command's exit code unless sed failed.
inline CommandResult run_until_line(const std::string& command, const std::string& pattern) {
  return run_command("bash -o pipefail -c \"" + command + " | sed -n '/" + pattern + "/{p;q}'\"");
}

// A command running in the background, output to `log_path`. `command` is a program and its
// arguments, optionally preceded by VAR=value assignments, as sh would split them; the process
// is that program itself (exec'd through env), so signals reach it directly. It starts with
// SIGHUP's default action, whatever the test was started with (nohup).
class Child {
 public:
  Child(const std::string& command, const std::string& log_path) {
    pid_ = fork();
    if (pid_ == 0) {
      ::signal(SIGHUP, SIG_DFL);
      const std::string line = "exec env " + command + " > '" + log_path + "' 2>&1";
      execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      wait();
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  void signal(int sig) const { ::kill(pid_, sig); }
  pid_t pid() const { return pid_; }
  // Waits for the exit; returns the exit code, or 128 + signal when killed.
  int wait() {
    int status = 0;
    waitpid(pid_, &status, 0);
    reaped_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  // Whether the process has exited (reaping it).
  bool exited() {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      reaped_ = true;
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return true;
    }
    return reaped_;
  }
  int exit_code() const { return exit_code_; }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  int exit_code_ = -1;
};

// Polls `condition` every millisecond for up to `timeout_s`; returns whether it became true.
inline bool wait_until(const std::function<bool()>& condition, double timeout_s = 60) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

using util::free_port;

// Copies the directory tree `from` to `to` (cp -a); fails the calling test when it cannot.
inline void copy_tree(const std::string& from, const std::string& to) {
  const CommandResult r = run_command("cp -a '" + from + "' '" + to + "'");
  if (r.exit_code != 0) throw std::runtime_error("cp -a " + from + " " + to + ": " + r.output);
}

// The rows of a metrics.jsonl file.
inline std::vector<nlohmann::json> read_metrics(const std::string& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  }
  return rows;
}

// The highest "batches" of a row of type `type` in a metrics.jsonl being written (-1 if none).
inline int64_t last_batches(const std::string& path, const std::string& type) {
  int64_t out = -1;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto row = nlohmann::json::parse(line, nullptr, false);
    if (!row.is_discarded() && row.value("type", "") == type) out = row.value("batches", out);
  }
  return out;
}

// The "batches" of each row of type `type`.
inline std::vector<int64_t> batches_of(const std::vector<nlohmann::json>& rows,
                                       const std::string& type) {
  std::vector<int64_t> out;
  for (const auto& r : rows) {
    if (r["type"] == type) out.push_back(r["batches"].get<int64_t>());
  }
  return out;
}

}  // namespace crucible::testing
