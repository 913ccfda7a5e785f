#include "profile/operator_trace.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <crucible/errors.h>

namespace crucible::profile {

OperatorTrace::OperatorTrace(const std::string& path) {
  // RecordProfile opens the file itself and says nothing when it cannot: try first.
  if (!std::ofstream(path)) {
    throw TrainingError(
        fmt::format("cannot create operator trace {}: {}", path, std::strerror(errno)));
  }
  record_ = std::make_unique<torch::autograd::profiler::RecordProfile>(path);
  was_enabled_ = at::isRecordFunctionEnabled();
  set_recording(false);
}

OperatorTrace::~OperatorTrace() {
  at::enableRecordFunction(was_enabled_);
  record_.reset();
}

void OperatorTrace::set_recording(bool on) { at::enableRecordFunction(on); }

}  // namespace crucible::profile
