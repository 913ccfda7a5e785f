#pragma once

#include <string>
#include <vector>

#include <fstream>

#include <nlohmann/json.hpp>

namespace crucible::search {

// experiment.jsonl: one JSON row per trial event, appended and flushed as it happens, so that a
// killed experiment loses at most the row being written.
class ExperimentLog {
 public:
  // Opens `path` for appending, creating it. The complete rows it holds are kept (rows()); a torn
  // last row, left by a kill, is cut off. Throws TrainingError naming the path when it cannot be
  // read or written.
  explicit ExperimentLog(const std::string& path);

  // The complete rows the file held when it was opened, in order.
  const std::vector<nlohmann::json>& rows() const { return rows_; }

  // Appends `rows`, each with "time" (seconds since the Unix epoch) added, in one write.
  void append(std::vector<nlohmann::json> rows);

 private:
  std::string path_;
  std::vector<nlohmann::json> rows_;
  std::ofstream out_;
};

}  // namespace crucible::search
