#pragma once

// The profiler that `profiling` in the experiment file switches on: per-phase timings of the
// training batches in its window, the chief's system use, and LibTorch's operator trace.

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <crucible/config.h>
#include <crucible/distributed.h>
#include <crucible/metrics.h>

#include "profile/operator_trace.h"
#include "profile/system_usage.h"

namespace crucible::profile {

// The timed parts of a training batch. kBatch is the whole of it (loader, train_batch, the
// schedulers and callbacks after it); kBackward (TrialContext::backward) and kStepOptimizer
// (TrialContext::step_optimizer) lie inside kTrainBatch; kGradientSync, the wait for the
// gradients' cross-rank average, lies inside one of those two.
enum class Phase { kBatch, kDataloaderNext, kTrainBatch, kBackward, kGradientSync, kStepOptimizer };
inline constexpr size_t kPhaseCount = 6;

// "batch", "dataloader_next", "train_batch", "backward", "gradient_sync", "step_optimizer".
const char* name_of(Phase phase);

// One rank's profiler for one fit. It profiles the batches config.profiles() selects: the fit
// loop brackets each training batch with begin_batch and end_batch, and ScopedPhase adds the
// phases inside it.
class Profiler {
 public:
  // `trace_file` is where the chief writes the operator trace when config.trace is set, after
  // what the run's earlier processes traced there;
  // `device` is the rank's training device (CUDA timings wait for it when config.sync_timings).
  // A trace that cannot be written is reported through `warn` (the cause and the path) and
  // training goes on without it.
  Profiler(const ProfilingConfig& config, torch::Device device, const DistributedContext& dist,
           std::string trace_file, std::function<void(const std::string&)> warn);
  // Ends a trace still recording (a run that ended inside its window), writing it.
  ~Profiler();
  Profiler(const Profiler&) = delete;
  Profiler& operator=(const Profiler&) = delete;

  // Starts batch `batch_idx`: opens its "crucible::batch" user scope for LibTorch's profilers
  // (as ScopedPhase does for the other phases) and, when it is profiled, starts its clock, the
  // period's system counters (the chief's, at the first profiled batch of a period) and the
  // trace's recording (the chief's, which records only inside profiled batches: no validation
  // or checkpoint).
  void begin_batch(int64_t batch_idx);
  // Ends the batch begun last: adds its time to kBatch, closes its scope, ends the period's system
  // counters when the next batch is not profiled and, after end_after_batch, writes the trace.
  void end_batch();
  // Whether the batch being trained is profiled.
  bool active() const { return active_; }
  // Adds `seconds` to `phase` of the batch being trained; requires active().
  void add(Phase phase, double seconds);
  // Waits for the device's queued work when config.sync_timings and the device is CUDA.
  void sync() const;

  // The profiling report of the batches profiled since the previous call, or {} when there were
  // none. Its values: "<phase>_ms", each phase's milliseconds per profiled batch averaged over
  // the ranks (phases that took no time on any rank are left out); in a distributed run
  // "batch_ms_slowest_rank", the largest rank's batch mean; on the chief, system_usage() from
  // the start of the period's first profiled batch to the end of its last (or to now, when the
  // next batch is profiled too), so that unprofiled batches, validations and checkpoints after
  // the window leave the system use alone. Every rank calls it at each training report:
  // in a distributed run it gathers the ranks' times whenever the period profiled a batch, which
  // is the same on every rank.
  MetricValues take_period();

  // Closes the scope of a batch not ended and writes the trace when it is still recording (the
  // run ends inside the window); a trace is written once, and none is started after it. The
  // trace file keeps what the run's earlier processes traced (OperatorTrace::write).
  void finish();

  // The end-of-run lines ("  profile: ..."): this rank's profiled batches and each phase's
  // mean and share of the batch time, and the trace file when one was written; "" when no batch
  // was profiled.
  std::string summary() const;

 private:
  struct PhaseTimes {
    std::array<double, kPhaseCount> seconds{};
    int64_t batches = 0;
  };

  const ProfilingConfig config_;
  const torch::Device device_;
  const DistributedContext& dist_;
  const std::string trace_file_;
  bool active_ = false;
  int64_t batch_idx_ = 0;
  std::chrono::steady_clock::time_point batch_started_;
  PhaseTimes period_, total_;
  int64_t first_profiled_ = -1, last_profiled_ = -1;
  // The chief's system counters at the start of the period's first profiled batch, and at the
  // end of its last when the batch after it is not profiled.
  std::optional<SystemCounters> period_counters_, period_end_counters_;
  std::optional<at::RecordFunction> batch_scope_;  // the batch begun, until it ends
  const std::function<void(const std::string&)> warn_;
  std::unique_ptr<OperatorTrace> trace_;  // the chief's, while it records
  bool trace_ended_ = false;              // whether finish() ended one
  bool trace_written_ = false;            // and wrote it
};

// Times one phase of the batch being trained while it lives, when `profiler` is not null and
// profiles that batch, and marks it as a user scope named "crucible::<phase>" for LibTorch's
// profilers, whichever one records.
class ScopedPhase {
 public:
  ScopedPhase(Profiler* profiler, Phase phase);
  ~ScopedPhase();
  ScopedPhase(const ScopedPhase&) = delete;
  ScopedPhase& operator=(const ScopedPhase&) = delete;

 private:
  Profiler* profiler_;  // null when not timing
  Phase phase_;
  std::chrono::steady_clock::time_point started_;
  at::RecordFunction scope_;
};

}  // namespace crucible::profile
