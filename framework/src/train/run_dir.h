#pragma once

#include <functional>
#include <memory>
#include <string>

#include <crucible/config.h>

#include "util/file_lock.h"

namespace crucible::train {

// A run directory: <host_path>/<name>/<run-id>/ holding config.yaml (the resolved config),
// trainer.log, metrics.jsonl, tensorboard/, checkpoints/, trial_library
// (plugin::kTrialLibraryFile) and, when profiling is enabled, profiling/.
struct RunDir {
  std::string path;
  std::string config_file() const { return path + "/config.yaml"; }
  std::string log_file() const { return path + "/trainer.log"; }
  std::string metrics_file() const { return path + "/metrics.jsonl"; }
  std::string tensorboard_dir() const { return path + "/tensorboard"; }
  // What the profiler writes (ProfilingConfig): metrics.jsonl of its reports and trace.json.
  std::string profiling_dir() const { return path + "/profiling"; }
  std::string profiling_metrics_file() const { return profiling_dir() + "/metrics.jsonl"; }
  std::string trace_file() const { return profiling_dir() + "/trace.json"; }
  std::string checkpoints() const;  // checkpoint::checkpoints_dir(path)

  // Drops the reports of batches after `batches` (-1: every report) from metrics.jsonl, the
  // profiler's metrics.jsonl and the TensorBoard event file, with a torn tail a kill left; a run
  // resuming from the checkpoint of `batches` then writes each report once. Damaged rows of the
  // metrics files are dropped and named through `warn` (metrics::truncate_metrics_file). Throws
  // TrainingError naming the file on failure.
  void keep_reports_until(int64_t batches,
                          const std::function<void(const std::string&)>& warn) const;
};

// A new run id: the UTC time and 16 random bits, "20261123-193509-1a2b".
std::string new_run_id();

// The directory a new run or experiment of `config` is written to: `output_dir`, or when it is
// empty a new one (named by new_run_id) in config::runs_dir. Throws ConfigError naming
// checkpoint_storage.host_path when a file stands on the way to config::runs_dir.
std::string new_run_path(const ExperimentConfig& config, const std::string& output_dir);

// Creates a fresh run directory (new_run_path of `output_dir`) and writes config.yaml into it,
// and trial_library when the entrypoint names a library on disk. Throws UsageError when
// `output_dir` already holds a run, TrainingError when a path cannot be created.
RunDir create_run_dir(const ExperimentConfig& config, const std::string& output_dir);

// Opens an existing run or experiment directory for resuming. Throws UsageError when it holds no
// run: no config.yaml, or a config.yaml among other files with nothing a run writes beside it (a
// project directory).
RunDir open_run_dir(const std::string& path);

// Whether directory `dir` holds a run or an experiment: a config.yaml (a regular file), and beside
// it something only those write (a log, metrics, checkpoints, trials) or nothing else (a run cut
// short right after writing its config.yaml). A config.yaml among a user's own files, in a
// project directory, is neither.
bool holds_run_or_experiment(const std::string& dir);

// Why directory `dir` holds no run or experiment: "no config.yaml in it", or "beside its
// config.yaml it holds other files (<one of them> and maybe more) and nothing a run writes (...)";
// "" when holds_run_or_experiment(dir).
std::string not_a_run_reason(const std::string& dir);

// Whether `dir` holds a run or an experiment (its config.yaml) of `config`, which a fit or search
// given `--output dir` then continues, as a requeued job reruns its command. False when `dir` is
// "" or holds no config.yaml. A config without reproducibility.experiment_seed matches whatever
// seed the recorded one has (a search that drew its seed recorded it). Throws UsageError listing
// the differing keys when it holds one of another config, and ConfigError when that config.yaml
// does not parse.
bool holds_run_of(const ExperimentConfig& config, const std::string& dir);

// Throws UsageError when `dir`, a fit's --output, cannot hold a run: it or a directory above it
// is a file, or it is a directory that holds no run or experiment (see open_run_dir) and holds
// files other than those of a run or an experiment (a run cut short before its config.yaml leaves
// only those).
void check_output_dir(const std::string& dir);

// Throws UsageError naming `flag` (such as "--output") when a command may not write the file
// `path` (a report page, predictions): it names a directory (or ends in '/'), its directory does
// not exist, or it is a file of a run or an experiment directory (config.yaml, trainer.log,
// metrics.jsonl, trial_library, latest, .lock, experiment.jsonl, experiment.log, best,
// trials/<id>.yaml or .log, anything under checkpoints/, tensorboard/ or profiling/).
void check_output_file(const std::string& path, const std::string& flag);

// Holds <dir>/.lock, creating `dir` when missing, for as long as the returned lock lives (or the
// process): one process at a time writes a run or an experiment. Waits up to 2 s for a holder
// that is exiting; throws UsageError when another process still holds it, TrainingError when
// `dir` or the lock cannot be made. On a file system without flock, says so through `warn` and
// returns null: the directory is then not locked.
std::shared_ptr<util::FileLock> lock_run_dir(const std::string& dir,
                                             const std::function<void(const std::string&)>& warn);

}  // namespace crucible::train
