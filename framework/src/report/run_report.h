#pragma once

// The report page of one run directory.

#include <string>

namespace crucible::report {

// Whether `dir` holds a run (train::holds_run_or_experiment) and no experiment.jsonl.
bool holds_run(const std::string& dir);

// The HTML page of run directory `run_dir`, read from its config.yaml, metrics.jsonl,
// profiling/metrics.jsonl, checkpoints and trainer.log, as far as they go (a run still training,
// or one that was killed, is reported up to its last complete row). Shows how the run ended, a
// chart per metric (training and validation together), the validations with the best one marked,
// the checkpoints, the profiler's phases when it ran, and the config. Links to the run's files
// are relative to `page_dir`, the directory the page is written to; `up` (HTML) is put above the
// title's facts, as a trial's link back to its experiment. An unfinished run is said to continue
// with `continue_command` ("": `trainer fit --resume RUN_DIR`); `ended`, unless "", is how the
// run ended as its caller knows it (a search's trial that the searcher stopped), said instead of
// what its files tell. Reads only. Throws ConfigError when config.yaml does not parse, and
// TrainingError naming the file and line of a damaged row. `status`, when given, receives how
// the run ended as the page says it.
std::string run_page(const std::string& run_dir, const std::string& page_dir,
                     const std::string& up = "", const std::string& continue_command = "",
                     const std::string& ended = "", std::string* status = nullptr);

// `path` relative to directory `base` ("../runs/x"), both made absolute first.
std::string relative_path(const std::string& path, const std::string& base);

}  // namespace crucible::report
