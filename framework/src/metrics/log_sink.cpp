#include "metrics/log_sink.h"

#include <string>

#include <fmt/format.h>

#include "util/number_text.h"

namespace crucible::metrics {

void LogSink::write(const Report& report) {
  std::string line = fmt::format("[{:<10}] batch {:>7}  epoch {:>6.2f} ", name_of(report.kind),
                                 report.progress.batches, report.progress.epochs);
  for (const auto& [name, v] : report.values) {
    line += fmt::format(" {}={}", name, util::number_text(v, 5));
  }
  if (!report.reason.empty()) {
    line += report.reason;
  } else if (report.batches_per_second) {
    line += fmt::format("  ({:.1f} batches/s", *report.batches_per_second);
    if (report.seconds_left) line += ", " + duration_text(*report.seconds_left) + " left";
    line += ")";
  } else if (report.kind == metrics::ReportKind::kValidation) {
    line += fmt::format("  ({:.1f}s)", report.seconds);
  }
  logger_->info(line);
}

}  // namespace crucible::metrics
