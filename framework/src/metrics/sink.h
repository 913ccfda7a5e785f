#pragma once

#include <memory>
#include <vector>

#include "metrics/report.h"

namespace crucible::metrics {

// A destination of reports: a file, the log, later TensorBoard or a searcher. Only the chief
// rank has sinks.
class MetricSink {
 public:
  virtual ~MetricSink() = default;
  // Takes one report. Throws TrainingError naming its destination when it cannot write.
  virtual void write(const Report& report) = 0;
};

// The sinks of a fit, fed in the order they were added.
class MetricSinks {
 public:
  void add(std::unique_ptr<MetricSink> sink) { sinks_.push_back(std::move(sink)); }
  void write(const Report& report) {
    for (auto& sink : sinks_) sink->write(report);
  }
  bool empty() const { return sinks_.empty(); }

 private:
  std::vector<std::unique_ptr<MetricSink>> sinks_;
};

}  // namespace crucible::metrics
