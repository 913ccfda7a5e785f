#include "metrics/report.h"

namespace crucible::metrics {

const char* name_of(ReportKind kind) {
  return kind == ReportKind::kTraining ? "training" : "validation";
}

}  // namespace crucible::metrics
