#include "profile/operator_trace.h"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include "checkpoint/file_io.h"

namespace crucible::profile {

OperatorTrace::OperatorTrace(std::string path) : path_(std::move(path)) {
  record_ = std::make_unique<torch::autograd::profiler::RecordProfile>(text_);
  was_enabled_ = at::isRecordFunctionEnabled();
  set_recording(false);
}

OperatorTrace::~OperatorTrace() {
  at::enableRecordFunction(was_enabled_);
  record_.reset();
}

void OperatorTrace::set_recording(bool on) { at::enableRecordFunction(on); }

void OperatorTrace::write() {
  TORCH_INTERNAL_ASSERT(record_, "OperatorTrace::write called twice");
  record_.reset();  // RecordProfile writes the trace as it ends
  checkpoint::replace_atomically(path_, text_.str());
}

}  // namespace crucible::profile
