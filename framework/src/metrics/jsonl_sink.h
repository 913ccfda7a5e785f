#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include "metrics/sink.h"

namespace crucible::metrics {

// metrics.jsonl: one JSON object per report, {"type", "batches", "records", "epochs",
// "metrics"}. Rows hold only deterministic values (no timing), so equal runs give equal files.
class JsonlSink : public MetricSink {
 public:
  // Appends to `path` (created if absent); throws TrainingError naming the path on failure.
  explicit JsonlSink(const std::string& path);
  void write(const Report& report) override;

 private:
  std::string path_;
  std::ofstream out_;
};

// Keeps the rows of a metrics.jsonl whose "batches" is at most `batches` (resume support); a torn
// last line and everything after it are dropped.
void truncate_metrics_file(const std::string& path, int64_t batches);

}  // namespace crucible::metrics
