#pragma once

// What a search shows people: a line per experiment.jsonl row, the table of trials, and the
// best checkpoint of a trial.

#include <string>

#include <nlohmann/json.hpp>

#include "search/scheduler.h"

namespace crucible::search {

// One line for the experiment log saying what `row` records, e.g.
// "trial 3: validation_loss 0.412 at 62 batches, rung 0: stop". `unit` names lengths. Throws
// nlohmann::json::exception or crucible::Error when a field it shows is missing or of another
// type.
std::string describe_row(const nlohmann::json& row, const std::string& metric,
                         const std::string& unit);

// Whether `row` records a restart that used up one of its trial's max_restarts: a "restarted"
// row but one marked `stopped` (a stop from outside the search, which uses up none).
bool uses_a_restart(const nlohmann::json& row);

// The trials as a table: id, state, best metric, length trained and hyperparameters; the trials
// that validated first, best metric first, then the others by id.
std::string summary_table(const Scheduler& scheduler, const std::string& metric);

// The checkpoint of run `run_dir` whose validation has the best `metric` (the earliest of equal
// ones), or "" when no checkpoint holds a validation. A checkpoint that the run's own process
// deletes meanwhile (its retention, while it trains) is passed over.
std::string best_checkpoint(const std::string& run_dir, const std::string& metric,
                            bool smaller_is_better);

}  // namespace crucible::search
