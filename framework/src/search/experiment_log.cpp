#include "search/experiment_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "checkpoint/file_io.h"

namespace crucible::search {

ExperimentLog::ExperimentLog(const std::string& path) : path_(path) {
  std::string kept;
  int64_t torn_line = 0;  // the line number of a row that is not a JSON object; 0: none
  {
    std::ifstream in(path);
    int64_t number = 0;
    for (std::string line; std::getline(in, line);) {
      ++number;
      if (line.empty()) continue;
      if (torn_line > 0) {
        throw TrainingError(fmt::format(
            "{}:{}: not a JSON row, and rows follow it: the experiment log is damaged (only a "
            "kill's torn last row is cut off); repair or remove that line to resume",
            path, torn_line));
      }
      nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
      if (row.is_discarded() || !row.is_object()) {
        torn_line = number;
        continue;
      }
      rows_.push_back(std::move(row));
      kept += line + "\n";
    }
  }
  if (torn_line > 0) checkpoint::replace_atomically(path, kept);
  fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw TrainingError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  }
}

ExperimentLog::~ExperimentLog() {
  if (fd_ >= 0) ::close(fd_);
}

void ExperimentLog::append(std::vector<nlohmann::json> rows) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  std::string text;
  for (auto& row : rows) {
    row["time"] = std::chrono::duration<double>(now).count();
    text += row.dump() + "\n";
  }
  const auto fail = [&] {
    return TrainingError(fmt::format("cannot write {}: {}", path_, std::strerror(errno)));
  };
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw fail();
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd_) != 0) throw fail();
}

}  // namespace crucible::search
