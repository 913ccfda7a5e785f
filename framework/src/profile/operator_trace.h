#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <string>

namespace torch::autograd::profiler {
struct RecordProfile;
}

namespace crucible::profile {

// The range each traced batch is in the trace; every operator recorded lies inside one.
inline constexpr const char* kBatchRange = "crucible::batch";

// LibTorch's operator trace of the calling thread (and the autograd threads its backward passes
// run on), in the Chrome trace format that chrome://tracing and Perfetto open. It uses the
// profiler every LibTorch has, with or without Kineto; it records on the CPU side. The trace is
// kept in memory until write().
class OperatorTrace {
 public:
  // Starts the trace of this process's batches from `first_batch` on for `path`, recording
  // nothing until set_recording(true). The trace is to record each of those batches, in order,
  // inside a kBatchRange range (see merge_traces).
  OperatorTrace(std::string path, int64_t first_batch);
  // Gives the calling thread back the RecordFunction setting it had; a trace not written is
  // dropped.
  ~OperatorTrace();
  OperatorTrace(const OperatorTrace&) = delete;
  OperatorTrace& operator=(const OperatorTrace&) = delete;

  // Whether the operators the calling thread runs from now on are recorded. It switches the
  // thread's RecordFunction, so no other profiler sees that thread's operators while off.
  void set_recording(bool on);

  // Ends the trace and replaces the file at `path` atomically with merge_traces of what it held
  // (the traces of the run's earlier processes) and this trace: afterwards the file is that or
  // what it was before, never part of it. A file that is not such a trace is replaced by this
  // trace alone, which `warn` reports. Throws the error, naming the path, when the file cannot
  // be read or written (its directory must exist). Requires: not called before.
  void write(const std::function<void(const std::string&)>& warn);

 private:
  std::string path_;
  int64_t first_batch_;
  std::ostringstream text_;  // declared before record_, which writes into it as it ends
  std::unique_ptr<torch::autograd::profiler::RecordProfile> record_;
  bool was_enabled_;  // the thread's RecordFunction setting before the trace
};

// The Chrome trace (a JSON array of events) of a run's processes: the events of `earlier` (a
// trace merge_traces made, or LibTorch's) and then `events`, the trace LibTorch wrote of one
// process's batches from `first_batch` on. That process's events take pid `first_batch`, a
// "process_name" metadata event naming it "batches from <first_batch>" and a
// "process_sort_index" of `first_batch`, and are shifted on the time axis to begin where the
// earlier events end. Batches from `first_batch` on in `earlier` (run again after a resume from
// an earlier checkpoint) are left out: an earlier process's events whose pid is at least
// `first_batch`, and those of process pid P from its (first_batch - P)-th kBatchRange range on
// (counted from 0 in time order; its k-th is batch P + k). Events under a pid that is not a
// number are kept. Throws std::invalid_argument when `earlier` is not a Chrome trace (a JSON array
// of objects, or an object holding one as "traceEvents"), std::runtime_error when `events` is not.
std::string merge_traces(const std::string& earlier, const std::string& events,
                         int64_t first_batch);

}  // namespace crucible::profile
