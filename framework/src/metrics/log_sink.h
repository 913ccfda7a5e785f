#pragma once

#include "metrics/sink.h"
#include "util/logger.h"

namespace crucible::metrics {

// One readable line per report in the run's log (and on the console when the logger echoes):
// "[training  ] batch     200  epoch   0.21  loss=0.5  (41.2 batches/s)".
class LogSink : public MetricSink {
 public:
  // `logger` must outlive the sink.
  explicit LogSink(util::Logger* logger) : logger_(logger) {}
  void write(const Report& report) override;

 private:
  util::Logger* logger_;
};

}  // namespace crucible::metrics
