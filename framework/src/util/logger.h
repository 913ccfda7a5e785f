#pragma once

#include <fstream>
#include <mutex>
#include <string>

namespace crucible::util {

// Writes timestamped lines to a run's log file and, when enabled, plain lines to stdout. A line
// the file cannot take (a full disk, an I/O error) ends the file's part: the logger says so once on
// stderr, naming the file and the cause, even when the console is off, and goes on writing to the
// console alone.
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

 private:
  void write(const char* level, const std::string& line, bool to_stderr, bool console = true);
  std::mutex mu_;
  std::ofstream file_;
  std::string path_;
  bool console_ = true;
  bool warnings_only_ = false;
};

}  // namespace crucible::util
