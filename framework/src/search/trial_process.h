#pragma once

// One trial of a search as `trainer fit` processes: its files in the experiment directory, the
// command that trains it to a length, and what its run says afterwards.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <crucible/config.h>

#include "search/scheduler.h"

namespace crucible::search {

// The files of trial `id` in experiment directory `experiment`.
struct TrialFiles {
  TrialFiles(const std::string& experiment, int64_t id);
  std::string run_dir;      // <experiment>/trials/<id>/, a normal run directory
  std::string config_file;  // <experiment>/trials/<id>.yaml, the config it started from
  std::string log_file;     // <experiment>/trials/<id>.log, what its processes printed
};

// The config of one trial of `experiment`: its hyperparameters as constants, searcher single
// (same metric and direction), max_length `length`.
ExperimentConfig trial_config(const ExperimentConfig& experiment, const nlohmann::json& hparams,
                              const Length& length);

// The command line that trains the trial to `length`: `trainer fit CONFIG --output RUN_DIR`
// when its run has no checkpoint yet (removing a run directory that a killed process left
// without one, and writing CONFIG), else `trainer fit --resume RUN_DIR` with max_length set to
// `length` and, --set as well, the values of `experiment` in the keys safe on a search's resume
// (config::is_safe_search_change) where the run's config.yaml differs (changes accepted since
// the run was last resumed). Every process writes its reports to its run's log only (--quiet).
std::vector<std::string> segment_command(const std::string& trainer, const TrialFiles& files,
                                         const ExperimentConfig& experiment,
                                         const TrialRecord& trial, const Length& length);

// The result of a segment whose process exited 0: the last validation in the run's
// metrics.jsonl, its length in `unit` and its `metric`, and the best `metric` of all its
// validations (`smaller_is_better` ranks them; NaN ranks last); ended_early holds the reason the
// run gives when that length is short of `length`. Throws TrainingError naming the run when its
// metrics.jsonl cannot be read or holds no validation, ConfigError when it lacks the metric.
SegmentResult read_segment_result(const TrialFiles& files, int64_t trial, const Length& length,
                                  const std::string& metric, bool smaller_is_better);

// The furthest length in `unit` that a row of the trial's metrics.jsonl records: how far a run
// that failed got. 0 when the run reported nothing or its file cannot be read.
int64_t reached_length(const TrialFiles& files, LengthUnit unit);

// What a failed process said: the last line of `log_file` that starts with "error: " (without
// it) and the indented lines right after it (a launcher's tail of the failed rank's output),
// joined by spaces on one line; else its last non-empty line that is not a warning ("warning: "),
// else "".
std::string last_error(const std::string& log_file);

}  // namespace crucible::search
