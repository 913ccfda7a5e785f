#pragma once

// What a fit reports: training means and validation results.

#include <chrono>
#include <memory>
#include <string>

#include <crucible/config.h>
#include <crucible/distributed.h>
#include <crucible/metrics.h>

#include "metrics/reducer.h"
#include "metrics/report.h"
#include "metrics/sink.h"
#include "train/fit_state.h"
#include "train/run_dir.h"
#include "util/logger.h"

namespace crucible::train {

// Accumulates one rank's training metrics between reports and reports them, averaged across the
// ranks, with the validation results. The chief feeds each report to its sinks (metrics.jsonl
// and the log); the other ranks take part in the averaging only.
class Reporter {
 public:
  Reporter(const ExperimentConfig& config, const DistributedContext& dist)
      : config_(config),
        dist_(dist),
        training_(config.optimizations.non_finite == NonFinitePolicy::kSkip) {}

  // Batches per epoch (for naming the epoch of a batch in messages) and the batch count training
  // ends at (for the estimate of the time left).
  void set_length(int64_t epoch_len, int64_t max_batches) {
    epoch_len_ = epoch_len;
    max_batches_ = max_batches;
  }
  // Starts the clocks when this process begins training, with `batches` already trained (a
  // resumed run's checkpoint).
  void start_training(int64_t batches);

  // Starts writing reports to the metrics.jsonl and the TensorBoard event file of `run`
  // (appended) and to `logger`. Only the chief calls it.
  void open(const RunDir& run, util::Logger* logger);
  // Feeds every later report to `sink` as well.
  void add_sink(std::unique_ptr<metrics::MetricSink> sink) { sinks_.add(std::move(sink)); }

  // Adds the metrics train_batch returned for batch `batch_idx` (no host sync).
  void add_training(const Metrics& metrics, int64_t batch_idx) {
    training_.add(metrics, batch_idx);
    ++trained_since_;
  }
  // Adds n to the training count `name` (reported as its sum over the period).
  void add_training_count(const std::string& name, int64_t n) { training_.add_count(name, n); }
  // Reports the training means since the last report with the batches per second since then
  // (of the batches this process trained, none when it trained none: the sums a resumed run
  // restored were trained by an earlier process) and the estimated time left (none in test
  // mode), on every rank; nothing when no batch was added. Throws TrainingError, after
  // reporting, when a mean is not finite (unless optimizations.non_finite is skip), naming the
  // metric, the first batch with a non-finite value, its epoch and state.last_good_checkpoint().
  void report_training(const FitState& state, const metrics::Progress& progress);
  // Throws as report_training would, without reporting; every rank calls it.
  void check_training_finite(const FitState& state) const;

  // Reports validation `values`, which took `seconds`, and records them in `state`
  // (last_validation, validated_at) and the seconds in the summary's.
  void report_validation(FitState& state, const MetricValues& values, double seconds,
                         const metrics::Progress& progress);
  // Reports the profiler's `values` for the period ending at `progress` (Profiler::take_period).
  void report_profile(const metrics::Progress& progress, const MetricValues& values);
  // Reports that training stops before max_length, and why.
  void report_stop(const metrics::Progress& progress, const std::string& reason);
  // Whether state.last_validation is the best so far by searcher.metric (a NaN never is); if so,
  // records it as state.best_metric. Throws ConfigError naming the metrics present when
  // searcher.metric is not among them.
  bool record_best(FitState& state) const;
  // The best searcher.metric of the validation rows of `metrics_file` up to batch `batches` (a
  // NaN never is; a row without the metric is passed over); nullopt when none has a number.
  std::optional<double> best_in_rows(const std::string& metrics_file, int64_t batches) const;
  // Throws ConfigError naming the metrics present when the experiment file's early_stopping
  // metric is not among `values`, the metrics of a validation.
  void check_early_stopping_metric(const MetricValues& values) const;

  // Starts the throughput clock afresh (after time not spent training, when nothing is pending).
  void restart_clock() { since_ = std::chrono::steady_clock::now(); }
  // The training loader took `elapsed` to hand over a batch: counted in the summary.
  void data_took(std::chrono::steady_clock::duration elapsed) {
    data_seconds_ += std::chrono::duration<double>(elapsed).count();
  }
  // A checkpoint took `elapsed`: left out of the pending report's throughput (the clock starts
  // that much later) and counted in the summary's checkpoint time.
  void checkpoint_took(std::chrono::steady_clock::duration elapsed) {
    since_ += elapsed;
    checkpoint_seconds_ += std::chrono::duration<double>(elapsed).count();
  }

  // The end-of-run lines for the log, after "done: ...": this process's batches, wall time and
  // pace with the time spent waiting for training data, validating and checkpointing; the last
  // validation's metrics; the best searcher metric; how to open `run_dir` in TensorBoard.
  std::string summary(const FitState& state, const std::string& run_dir) const;

  // The pending training sums of this rank, for checkpoints; and back.
  nlohmann::json training_state() const { return training_.state(); }
  void restore_training(const nlohmann::json& state) { training_.restore(state); }

 private:
  void check_finite(const MetricValues& values, const FitState& state) const;

  const ExperimentConfig& config_;
  const DistributedContext& dist_;
  metrics::TrainingAccumulator training_;
  int64_t epoch_len_ = 1;
  int64_t max_batches_ = 0;
  metrics::MetricSinks sinks_;
  std::chrono::steady_clock::time_point since_ = std::chrono::steady_clock::now();
  int64_t trained_since_ = 0;  // batches this process added since the last report
  // This process's training: when it began, at which batch, and its time waiting for data,
  // validating and checkpointing.
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  int64_t started_at_ = 0;
  double data_seconds_ = 0;
  double validation_seconds_ = 0;
  double checkpoint_seconds_ = 0;
};

}  // namespace crucible::train
