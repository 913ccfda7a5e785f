#pragma once

// What a fit reports, as data: the one thing every metric sink receives.

#include <cstdint>
#include <optional>
#include <string>

#include <crucible/metrics.h>

#include "util/name_table.h"

namespace crucible::metrics {

// Where a report sits in training.
struct Progress {
  int64_t batches = 0;
  int64_t records = 0;
  double epochs = 0;
};

enum class ReportKind {
  kTraining,    // the means of the training metrics since the previous training report
  kValidation,  // the reduced metrics of one validation pass
  kStopped,     // training ended before max_length (early stopping, a trial's request); `reason`
  kProfiling,   // the profiler's phase timings and system use since the previous one
};

// The spelling of each kind in metrics.jsonl's "type" and the log: the only table of it.
const util::NameTable<ReportKind>& report_kind_names();
// "training", "validation", "stopped", "profiling".
const char* name_of(ReportKind kind);

struct Report {
  ReportKind kind = ReportKind::kTraining;
  Progress progress;
  MetricValues values;
  // Timing, which differs between equal runs: the seconds the report covers (the training
  // since the previous report, or the validation pass), and for training the batches per second
  // over them.
  double seconds = 0;
  std::optional<double> batches_per_second;
  // Training: the estimated seconds until max_length, at the mean pace of this process's batches
  // so far (validation and checkpoints included); nullopt when there is no estimate.
  std::optional<double> seconds_left;
  std::string reason;  // kStopped: why
};

// `seconds` for people: "0.4s", "42s", "12m 05s", "3h 07m". Below 0 (or NaN) counts as 0, above
// 1e12 as 1e12.
std::string duration_text(double seconds);

}  // namespace crucible::metrics
