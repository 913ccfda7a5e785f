#pragma once

#include <fstream>
#include <mutex>
#include <string>

namespace crucible::util {

// Writes timestamped lines to a run's log file and, when enabled, plain lines to stdout.
class Logger {
 public:
  Logger() = default;
  // Appends to `path`; throws TrainingError naming the path when it cannot be opened.
  void open(const std::string& path, bool console);
  void info(const std::string& line);
  void warn(const std::string& line);

 private:
  void write(const char* level, const std::string& line, bool to_stderr);
  std::mutex mu_;
  std::ofstream file_;
  bool console_ = true;
};

}  // namespace crucible::util
