#include "util/logger.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <iostream>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "util/broken_pipes.h"

namespace crucible::util {
namespace {

// The name of console stream `stream` (0 stdout, 1 stderr) in messages.
const char* console_name(size_t stream) {
  return stream == 1 ? "standard error" : "standard output";
}

}  // namespace

void Logger::open(const std::string& path, bool console) {
  std::lock_guard<std::mutex> lock(mu_);
  console_ = console;
  path_ = path;
  file_.open(path, std::ios::app);
  if (!file_) {
    throw TrainingError(fmt::format("cannot open log file {}: {}", path, std::strerror(errno)));
  }
}

void Logger::console_warnings_only() {
  std::lock_guard<std::mutex> lock(mu_);
  warnings_only_ = true;
}

void Logger::info(const std::string& line) {
  if (!warnings_only_) write("INFO", line, false);
}

void Logger::warn(const std::string& line) { write("WARN", line, true); }

void Logger::error(const std::string& line) { write("ERROR", line, true, false); }

std::string Logger::console_lost() {
  if (!lost_.load(std::memory_order_acquire)) {
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (lock.owns_lock()) probe_console();
  }
  return lost_.load(std::memory_order_acquire) ? console_lost_ : std::string();
}

void Logger::probe_console() {
  if (!console_) return;
  // The streams write_console would write to next: info lines to stdout (a warnings-only
  // logger's warnings once stderr is closed), warnings to stderr.
  pollfd fds[2];
  nfds_t n = 0;
  if (!closed_[0] && (!warnings_only_ || closed_[1])) fds[n++] = {STDOUT_FILENO, 0, 0};
  if (!closed_[1]) fds[n++] = {STDERR_FILENO, 0, 0};
  if (n == 0 || ::poll(fds, n, 0) <= 0) return;
  for (nfds_t i = 0; i < n; ++i) {
    if (reader_gone(fds[i].fd, fds[i].revents)) close_console(fds[i].fd == STDOUT_FILENO ? 0 : 1);
  }
}

void Logger::close_console(size_t stream) {
  closed_[stream] = true;
  if (lost_.load(std::memory_order_relaxed)) return;
  console_lost_ = fmt::format("{}: {}", console_name(stream), std::strerror(EPIPE));
  lost_.store(true, std::memory_order_release);
}

void Logger::write(const char* level, const std::string& line, bool to_stderr, bool console) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string note = console_ && console ? write_console(line, to_stderr) : "";
  if (!console_ && console && to_stderr) {
    // The console is off (--quiet), but a warning still goes to stderr, as best it can: a write
    // error loses the line and closes nothing.
    std::cerr << "warning: " + line + "\n" << std::flush;
    std::cerr.clear();
  }
  write_file(level, line);
  if (!note.empty()) write_file("WARN", note);
}

std::string Logger::write_console(const std::string& line, bool to_stderr) {
  const size_t stream = to_stderr && !closed_[1] ? 1 : 0;
  if (closed_[stream]) return "";
  std::ostream& out = stream == 1 ? std::cerr : std::cout;
  out.clear();  // an earlier error that did not close the stream, or another writer's
  errno = 0;
  // One write: another writer (a report of util::CrashReports) cannot split the line.
  out << (to_stderr ? "warning: " : "") + line + "\n" << std::flush;
  if (out) return "";
  const int error = errno;
  if (error == EPIPE) {
    close_console(stream);
    return "";
  }
  if (console_error_noted_) return "";
  console_error_noted_ = true;
  return fmt::format("cannot write to {}: {}; the console may lack lines from here on",
                     console_name(stream), error != 0 ? std::strerror(error) : "unknown error");
}

void Logger::write_file(const char* level, const std::string& line) {
  if (!file_.is_open()) return;
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
  file_ << stamp << " " << level << " " << line << '\n';
  file_.flush();
  if (!file_) {
    const int saved = errno;
    file_.close();
    std::cerr << fmt::format(
                     "warning: cannot write log file {}: {}; nothing more goes to it, and it may "
                     "lack: {}",
                     path_, std::strerror(saved), line)
              << std::endl;
  }
}

}  // namespace crucible::util
