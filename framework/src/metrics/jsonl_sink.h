#pragma once

#include <cstdint>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "metrics/sink.h"

namespace crucible::metrics {

// A JSON-lines file of reports: one JSON object per report, {"type", "batches", "records",
// "epochs", "metrics"} (and "reason" for a stop). A run's metrics.jsonl takes the training,
// validation and stop reports, which hold only deterministic values (no timing), so equal runs
// give equal files; its profiling/metrics.jsonl takes the profiling reports.
class JsonlSink : public MetricSink {
 public:
  // Appends the reports of `kinds` to `path` (created if absent); throws TrainingError naming the
  // path on failure.
  JsonlSink(const std::string& path, std::vector<ReportKind> kinds);
  void write(const Report& report) override;

 private:
  std::string path_;
  std::vector<ReportKind> kinds_;
  std::ofstream out_;
};

// The kind of a metrics.jsonl row; nullopt when its "type" is missing, not a string, or no kind's
// name.
std::optional<ReportKind> kind_of(const nlohmann::json& row);

// Keeps the rows of a metrics.jsonl whose "batches" is at most `batches` (resume support). A torn
// last line is dropped. A damaged line (not a JSON object) with rows after it is dropped too, and
// named through `warn` with its line number and text; the rows after it are kept.
void truncate_metrics_file(const std::string& path, int64_t batches,
                           const std::function<void(const std::string&)>& warn);

}  // namespace crucible::metrics
