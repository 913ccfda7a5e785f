#pragma once

#include <array>
#include <atomic>
#include <fstream>
#include <mutex>
#include <string>

namespace crucible::util {

// Writes timestamped lines to a run's log file and, when enabled, plain lines to the console:
// info lines to stdout, warnings to stderr (to stdout once stderr is closed). With the console
// off, warnings still go to stderr, as best they can (a write error loses the line, and closes and
// records nothing). A line the file
// cannot take (a full disk, an I/O error) ends the file's part: the logger says so once on stderr,
// naming the file and the cause, even when the console is off, and goes on writing to the console
// alone. A console stream whose reader went away (a write fails with EPIPE, or console_lost()
// finds it before any write: the pipe it feeds was closed) is closed for good and recorded; the
// logger's owner decides what that means (a fit stops with a checkpoint). Other console write
// errors (a full disk under a redirection, a terminal gone under nohup or disown, an interrupted
// write) lose that line only; the first is noted in the file. Without SIGPIPE survived
// (util::survive_broken_pipes), a closed pipe ends the process at the write instead.
class Logger {
 public:
  Logger() = default;
  // Appends to `path`; throws TrainingError naming the path when it cannot be opened.
  void open(const std::string& path, bool console);
  // Without a file: info() writes nothing, warn() writes to stderr (a non-chief rank's logger).
  void console_warnings_only();
  void info(const std::string& line);
  void warn(const std::string& line);
  // Records the error a run ends with in the file only: the caller reports it to the user.
  void error(const std::string& line);
  // "" while no console stream was closed, else the first one and why: "standard output: Broken
  // pipe" or "standard error: Broken pipe". A stream this logger writes to that is a pipe or a
  // local socket with no reader left counts as closed from this call on, whether or not a write has
  // found it yet (one poll(2) of the console per call while none is closed; a call while the
  // logger writes a line puts the check off to the next call or leaves it to that write). Does
  // not wait for a line being written.
  std::string console_lost();

 private:
  void write(const char* level, const std::string& line, bool to_stderr, bool console = true);
  // Writes `line` to the console stream it goes to; returns a line for the file when a write
  // error that does not close the stream is the first one. Requires mu_.
  std::string write_console(const std::string& line, bool to_stderr);
  // Closes console stream `stream` (0 stdout, 1 stderr) for good, its reader gone, and records
  // it when it is the first. Requires mu_.
  void close_console(size_t stream);
  // Closes the console streams this logger writes to that are pipes or sockets whose reader is
  // gone. Requires mu_.
  void probe_console();
  // Appends a timestamped line to the file, closing it on failure. Requires mu_.
  void write_file(const char* level, const std::string& line);
  mutable std::mutex mu_;
  std::ofstream file_;
  std::string path_;
  bool console_ = true;
  bool warnings_only_ = false;
  std::array<bool, 2> closed_{};  // stdout, stderr: a write failed with EPIPE
  bool console_error_noted_ = false;
  std::atomic<bool> lost_{false};  // console_lost_ is set
  std::string console_lost_;       // written once, before lost_ is set
};

}  // namespace crucible::util
