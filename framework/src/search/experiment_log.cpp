#include "search/experiment_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "util/file_io.h"
#include "util/json_lines.h"

namespace crucible::search {

const util::NameTable<TrialEvent>& event_names() {
  static const util::NameTable<TrialEvent> table{
      {TrialEvent::kCreated, "created"},     {TrialEvent::kValidated, "validated"},
      {TrialEvent::kRestarted, "restarted"}, {TrialEvent::kStopped, "stopped"},
      {TrialEvent::kCompleted, "completed"}, {TrialEvent::kFailed, "failed"},
      {TrialEvent::kInvalid, "invalid"},     {TrialEvent::kSearchFailed, "search_failed"},
      {TrialEvent::kResumed, "resumed"}};
  return table;
}

std::optional<TrialEvent> event_of(const nlohmann::json& row) {
  return util::enum_field(row, "event", event_names());
}

bool is_decision(const nlohmann::json& row) {
  const std::optional<TrialEvent> event = event_of(row);
  return event != TrialEvent::kRestarted && event != TrialEvent::kSearchFailed &&
         event != TrialEvent::kResumed;
}

ExperimentLog::ExperimentLog(const std::string& path) : path_(path) {
  util::JsonLines lines = util::read_json_lines(
      path,
      "the experiment log is damaged (only a kill's torn last row is cut off); repair or remove "
      "that line to resume",
      true);
  rows_ = std::move(lines.rows);
  if (lines.torn_line > 0) {
    std::string kept;
    for (const nlohmann::json& row : rows_) kept += row.dump() + "\n";
    util::replace_atomically(path, kept);
  }
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
