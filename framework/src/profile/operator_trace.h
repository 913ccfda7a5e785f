#pragma once

#include <memory>
#include <sstream>
#include <string>

namespace torch::autograd::profiler {
struct RecordProfile;
}

namespace crucible::profile {

// LibTorch's operator trace of the calling thread (and the autograd threads its backward passes
// run on), in the Chrome trace format that chrome://tracing and Perfetto open. It uses the
// profiler every LibTorch has, with or without Kineto; it records on the CPU side. The trace is
// kept in memory until write().
class OperatorTrace {
 public:
  // Starts a trace for `path`, recording nothing until set_recording(true).
  explicit OperatorTrace(std::string path);
  // Gives the calling thread back the RecordFunction setting it had; a trace not written is
  // dropped.
  ~OperatorTrace();
  OperatorTrace(const OperatorTrace&) = delete;
  OperatorTrace& operator=(const OperatorTrace&) = delete;

  // Whether the operators the calling thread runs from now on are recorded. It switches the
  // thread's RecordFunction, so no other profiler sees that thread's operators while off.
  void set_recording(bool on);

  // Ends the trace and replaces the file at `path` with it atomically: afterwards the file is
  // the whole trace or what it was before, never part of the trace. Throws the error, naming
  // the path, when it cannot be written (its directory must exist). Requires: not called before.
  void write();

 private:
  std::string path_;
  std::ostringstream text_;  // declared before record_, which writes into it as it ends
  std::unique_ptr<torch::autograd::profiler::RecordProfile> record_;
  bool was_enabled_;  // the thread's RecordFunction setting before the trace
};

}  // namespace crucible::profile
