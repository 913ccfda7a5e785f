#include "search/experiment_log.h"

#include <cerrno>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "checkpoint/file_io.h"
#include "util/file_system.h"

namespace crucible::search {

ExperimentLog::ExperimentLog(const std::string& path) : path_(path) {
  std::string kept;
  bool torn = false;
  {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      nlohmann::json row = nlohmann::json::parse(line, nullptr, false);
      if (row.is_discarded() || !row.is_object()) {
        torn = true;
        break;
      }
      rows_.push_back(std::move(row));
      kept += line + "\n";
    }
  }
  if (torn) checkpoint::replace_atomically(path, kept);
  out_.open(path, std::ios::app);
  if (!out_) {
    throw TrainingError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  }
}

void ExperimentLog::append(std::vector<nlohmann::json> rows) {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  std::string text;
  for (auto& row : rows) {
    row["time"] = std::chrono::duration<double>(now).count();
    text += row.dump() + "\n";
  }
  out_.write(text.data(), static_cast<std::streamsize>(text.size()));
  out_.flush();
  if (!out_) throw TrainingError(fmt::format("cannot write {}: {}", path_, std::strerror(errno)));
}

}  // namespace crucible::search
