#pragma once

#include <memory>
#include <string>

namespace torch::autograd::profiler {
struct RecordProfile;
}

namespace crucible::profile {

// LibTorch's operator trace of the calling thread (and the autograd threads its backward passes
// run on), in the Chrome trace format that chrome://tracing and Perfetto open. It uses the
// profiler every LibTorch has, with or without Kineto; it records on the CPU side.
class OperatorTrace {
 public:
  // Opens a trace to be written to `path`, whose directory must exist, recording nothing until
  // set_recording(true). Throws TrainingError naming `path` when it cannot be created.
  explicit OperatorTrace(const std::string& path);
  // Writes the file, and gives the calling thread back the RecordFunction setting it had.
  ~OperatorTrace();
  OperatorTrace(const OperatorTrace&) = delete;
  OperatorTrace& operator=(const OperatorTrace&) = delete;

  // Whether the operators the calling thread runs from now on are recorded. It switches the
  // thread's RecordFunction, so no other profiler sees that thread's operators while off.
  void set_recording(bool on);

 private:
  std::unique_ptr<torch::autograd::profiler::RecordProfile> record_;
  bool was_enabled_;  // the thread's RecordFunction setting before the trace
};

}  // namespace crucible::profile
