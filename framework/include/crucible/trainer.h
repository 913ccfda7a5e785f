#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/arg.h>
#include <nlohmann/json.hpp>

#include <crucible/config.h>
#include <crucible/distributed.h>
#include <crucible/metrics.h>
#include <crucible/registry.h>

namespace crucible {

// What `trainer fit` does with its flags, for a program of one's own. Errors about an option
// name it by the `trainer` flag that sets it, since both read the same message: output_dir is
// --output, resume_dir --resume, test_mode --test-mode, allow_safe_changes --allow-safe-changes,
// warm_start --warm-start (and, in experiment.h, EvaluationOptions::checkpoint --checkpoint,
// predictions_file --output, slots --slots).
struct FitOptions {
  // One training batch, one validation batch, a checkpoint saved and loaded back.
  TORCH_ARG(bool, test_mode) = false;
  // The run directory to write; default <host_path>/<name>/<run-id>. Must not hold a run.
  TORCH_ARG(std::string, output_dir);
  // A run directory to continue from its latest checkpoint, writing into it.
  TORCH_ARG(std::string, resume_dir);
  // Print reports on stdout as well as into the run's log. Warnings go to stderr either way.
  TORCH_ARG(bool, console) = true;
  // With resume_dir: accept a config that differs from the checkpoint's in keys safe on resume
  // only (those `trainer keys` marks safe: lengths, periods, reporting, retention, profiling and
  // a few more). Other changes are refused.
  TORCH_ARG(bool, allow_safe_changes) = false;
  // A checkpoint, named as EvaluationOptions::checkpoint is, whose model weights initialise the
  // trial's models (fine-tuning); optimizer, schedulers and counters start fresh.
  TORCH_ARG(std::string, warm_start);
  // The ranks this process trains with (join_launched_run in experiment.h; run_experiment sets
  // it); must have resources.slots_per_trial ranks. Default: one process.
  TORCH_ARG(DistributedContext, distributed);
};

struct FitResult {
  std::string run_dir;
  int64_t batches_trained = 0;
  MetricValues last_validation;  // reduced metrics of the last validation (empty if none)
  std::string last_checkpoint;   // directory of the last checkpoint ("" if none)
  bool stopped = false;          // stopped early by a signal, after checkpointing
  // Why training ended before max_length at a trial's request or early stopping's, after a
  // final validation and checkpoint; "" when it did not.
  std::string stop_reason;
};

// Runs one trial of an experiment in this process, on the ranks FitOptions gives: trains,
// validates and checkpoints on the config's periods. run_experiment (experiment.h) builds one.
class Trainer {
 public:
  // Requires a config whose hyperparameters are all constants.
  Trainer(ExperimentConfig config, TrialFactory factory);
  // The trainer of checkpoint `dir` (a run's checkpoints/batch-<N>): the config the checkpoint
  // was written with, and its trial, looked up as load_trial does from the run's directory.
  // Throws UsageError when `dir` has no readable metadata.json, TrainingError when the metadata
  // is damaged, PluginError as load_trial.
  static Trainer from_checkpoint(const std::string& dir);
  // Trains until max_length (or the test-mode round trip). Throws crucible::Error subclasses
  // with a user-facing message; the last checkpoint written stays loadable.
  // SIGTERM, SIGUSR1, a first SIGINT and SIGHUP (unless ignored, as under nohup) finish the
  // current batch, write a checkpoint and return with `stopped` set; a second SIGINT exits the
  // process at once with kExitInterrupted. A console whose reader went away (with
  // options.console() on: a pipe or local socket with no reader left, found after each batch or
  // when a line fails with EPIPE) stops training the same way, on any rank: every rank stops.
  // A line written to it before the check needs SIGPIPE survived, as run_experiment arranges;
  // otherwise that write ends the process. Other console write errors only lose lines.
  FitResult fit(const FitOptions& options = FitOptions());

  // validate and predict run on the ranks of `dist` (default: this process alone), whatever
  // number of slots the run trained on. Their batches hold global_batch_size records in all,
  // which must be a multiple of dist.size() (else UsageError); rank r takes batches r,
  // r + size, r + 2 size, ... Every rank of `dist` must make the same call.
  // Restores checkpoint `dir` and runs the trial's validation; returns the reduced metrics, the
  // same on every rank.
  MetricValues validate(const std::string& checkpoint_dir,
                        const DistributedContext& dist = DistributedContext());

  // Restores checkpoint `dir`, runs predict_batch over build_predict_data_loader() and, on rank
  // 0, writes {"predictions": Tensor}, the rows in the loader's order whatever the number of
  // ranks, to `output_file` in torch.save's format (Python: torch.load, with weights_only=True
  // too; C++: torch::pickle_load). predict_batch must return tensors of one dtype and one shape
  // past the first dimension; under mixed precision it runs under autocast, so its outputs come
  // in the autocast dtype (bfloat16, say) unless it casts them. Returns the number of rows written,
  // on every rank.
  int64_t predict(const std::string& checkpoint_dir, const std::string& output_file,
                  const DistributedContext& dist = DistributedContext());

  // The config this trainer runs: as given, host_path made absolute.
  const ExperimentConfig& config() const { return config_; }

 private:
  ExperimentConfig config_;
  TrialFactory factory_;
};

}  // namespace crucible
