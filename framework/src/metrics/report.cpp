#include "metrics/report.h"

#include "util/name_table.h"

namespace crucible::metrics {

const char* name_of(ReportKind kind) {
  static const util::NameTable<ReportKind> names{{ReportKind::kTraining, "training"},
                                                 {ReportKind::kValidation, "validation"},
                                                 {ReportKind::kStopped, "stopped"}};
  return names.name(kind);
}

}  // namespace crucible::metrics
