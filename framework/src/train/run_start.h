#pragma once

// Where a fit writes, and what it continues from.

#include <string>

#include <crucible/trainer.h>

#include "train/run_dir.h"
#include "util/logger.h"

namespace crucible::train {

// Throws ConfigError when a process of `dist` cannot fit `config` (a searcher other than single,
// resources.slots_per_trial other than dist.size(), check_device_support on its device), and
// PluginError when the trial implements neither or both of the evaluation methods.
void check_runnable(const ExperimentConfig& config, const TrialFactory& factory,
                    const DistributedContext& dist = DistributedContext());

// Throws ConfigError naming the key when `config` asks for what `device` cannot do (fp16 mixed
// precision off CUDA).
void check_device_support(const ExperimentConfig& config, const torch::Device& device);

// `config` as `slots` processes evaluate it (trainer validate, predict): a checkpoint of a run
// on any number of slots restores into any number of processes, whose batches hold
// global_batch_size records in all. Throws UsageError when global_batch_size is not a multiple
// of `slots`.
ExperimentConfig for_evaluation(ExperimentConfig config, int64_t slots);

// Refuses, with a UsageError listing the changes, a resume of run `run` with `config` that
// differs from the run's config.yaml by a key that may not change on resume, or by one that may
// unless `allow_safe`: what start_run refuses on every rank, never more. (A key `trainer keys`
// marks safe or run may change; searcher.metric and smaller_is_better too unless each
// checkpoint holds a best value.) Reads only. Passes a run that holds no checkpoint (it starts
// again with any config). A launcher checks this once before it starts the ranks.
void check_resume_config(const ExperimentConfig& config, const RunDir& run, bool allow_safe);

// Throws UsageError when options.resume_dir() is combined with warm_start or test_mode.
void check_resume_options(const FitOptions& options);

// The run a fit writes into.
struct RunStart {
  RunDir run;
  std::string resume_from;  // the checkpoint a resumed run continues from; "" for a new run
  // Whether the searcher metric or its direction differs from resume_from's (accepted while it
  // holds no best value): its best is then to be found anew.
  bool searcher_metric_changed = false;
  // On the chief, the run's lock (lock_run_dir): keep it for as long as the fit writes the run.
  std::shared_ptr<util::FileLock> lock;
};

// Opens the run of `options` on every rank of options.distributed(). The chief creates the run
// directory (options.output_dir() or a new one), or opens it to continue it: for
// options.resume_dir(), or for an output_dir that already holds a run of `config`
// (holds_run_of), after locking it (lock_run_dir: UsageError when another process holds it).
// A continued run loses the checkpoints whose writing was cut short and resumes
// from the newest good one; one that has no checkpoint starts again from batch 0, its metrics
// cleared and its config.yaml rewritten to `config`. The chief opens `logger` on the run's log.
// Every rank learns the path and the checkpoint. On resume from a checkpoint the config is
// compared with the checkpoint's and with the run's config.yaml: a UsageError listing the changes
// refuses any unsafe change from the checkpoint's (config::is_safe_change; the searcher metric
// and its direction may change while the checkpoint holds no best value, and
// searcher_metric_changed then says so), and any change from config.yaml unless
// options.allow_safe_changes(); accepted ones rewrite config.yaml, so a later
// plain resume keeps them. Throws UsageError when resume_dir is combined with output_dir or
// warm_start, and when options.test_mode() would continue a run, or the run to continue is a
// test-mode one.
RunStart start_run(const ExperimentConfig& config, const FitOptions& options, util::Logger& logger);

}  // namespace crucible::train
