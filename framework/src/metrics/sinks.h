#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "metrics/reducer.h"
#include "util/logger.h"

namespace crucible::metrics {

// Where a report sits in training.
struct Progress {
  int64_t batches = 0;
  int64_t records = 0;
  double epochs = 0;
};

// Writes each report as one JSON object per line of metrics.jsonl, and one readable line to the
// log (and console). Rows hold only deterministic values, so equal runs give equal files.
class MetricsWriter {
 public:
  // Appends to `path` (created if absent); throws TrainingError naming the path on failure.
  MetricsWriter(const std::string& path, util::Logger* logger);
  // `kind` is "training" or "validation". `extra` is appended to the console line only.
  void write(const std::string& kind, const Progress& progress, const MetricValues& values,
             const std::string& extra = "");

 private:
  std::string path_;
  std::ofstream out_;
  util::Logger* logger_;
};

// Keeps the rows of a metrics.jsonl whose "batches" is at most `batches` (resume support).
void truncate_metrics_file(const std::string& path, int64_t batches);

}  // namespace crucible::metrics
