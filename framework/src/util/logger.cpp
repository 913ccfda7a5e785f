#include "util/logger.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <iostream>

#include <fmt/format.h>

#include <crucible/errors.h>

namespace crucible::util {

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

void Logger::write(const char* level, const std::string& line, bool to_stderr, bool console) {
  std::lock_guard<std::mutex> lock(mu_);
  if (console_ && console) {
    (to_stderr ? std::cerr : std::cout) << (to_stderr ? "warning: " : "") << line << std::endl;
  }
  if (file_.is_open()) {
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
}

}  // namespace crucible::util
