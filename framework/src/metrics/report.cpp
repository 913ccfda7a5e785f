#include "metrics/report.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace crucible::metrics {

const util::NameTable<ReportKind>& report_kind_names() {
  static const util::NameTable<ReportKind> names{{ReportKind::kTraining, "training"},
                                                 {ReportKind::kValidation, "validation"},
                                                 {ReportKind::kStopped, "stopped"},
                                                 {ReportKind::kProfiling, "profiling"}};
  return names;
}

const char* name_of(ReportKind kind) { return report_kind_names().name(kind); }

std::string duration_text(double seconds) {
  if (!(seconds > 0)) seconds = 0;  // NaN too
  seconds = std::min(seconds, 1e12);
  if (seconds < 9.95) return fmt::format("{:.1f}s", seconds);
  const auto s = static_cast<int64_t>(std::llround(seconds));
  if (s < 60) return fmt::format("{}s", s);
  if (s < 3600) return fmt::format("{}m {:02}s", s / 60, s % 60);
  return fmt::format("{}h {:02}m", s / 3600, s % 3600 / 60);
}

}  // namespace crucible::metrics
