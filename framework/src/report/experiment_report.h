#pragma once

// The report page of an experiment directory (a search).

#include <cstdint>
#include <functional>
#include <string>

namespace crucible::report {

// Whether `dir` holds an experiment: its experiment.jsonl.
bool holds_experiment(const std::string& dir);

// How experiment.jsonl tells that a trial ended.
struct TrialEnding {
  std::string state;  // as experiment.jsonl spells it: running, completed, stopped, failed, invalid
  // How the searcher ended it, which its own run cannot tell: "" unless the searcher stopped it
  // ("stopped by the searcher at rung 1, after 8 batches (validation_loss 1.2 there): ...").
  std::string searcher;
};

// The HTML page of experiment directory `dir`, read from its config.yaml, experiment.jsonl and
// best, as far as they go (a search still running, or one that was killed, is reported up to its
// last complete row). Shows how the search stands (complete when no trial runs and the searcher
// has created all of them: max_trials, or a grid's points; else how many ended, and the command
// that continues it), every trial's metric over its length with the best trial drawn out, the
// metric against each numeric hyperparameter, the trials sorted by their best metric (as the
// search's closing table), ASHA's rungs, and the events. trial_link(id, ending) is called once
// per trial, in the table's order; the trial's id links to what it returns unless that is "".
// Links to the experiment's files are relative to `page_dir`. `status`, when given, receives how
// the search stands as the page says it. Reads only. Throws ConfigError when config.yaml does not
// parse, and TrainingError naming the file and line of a damaged row.
std::string experiment_page(
    const std::string& dir, const std::string& page_dir,
    const std::function<std::string(int64_t, const TrialEnding&)>& trial_link,
    std::string* status = nullptr);

}  // namespace crucible::report
