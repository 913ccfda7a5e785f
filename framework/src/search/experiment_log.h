#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/name_table.h"

namespace crucible::search {

// What a row of experiment.jsonl records (its "event"), with the fields it adds to "trial" (a
// search_failed row has no "trial").
enum class TrialEvent {
  kCreated,    // the searcher created the trial: "hparams", "length" (its first segment)
  kValidated,  // it validated at a segment's end: "length", "metric", "decision"
  kRestarted,  // its process failed, or was stopped from outside, and runs again: "error"
  kStopped,    // it ends: the searcher stopped it
  kCompleted,  // it ends: it reached its length
  kFailed,     // it ends: it failed with no restart left ("error")
  kInvalid,    // it ends: it rejected its hyperparameters ("error")
  // No trial's: an error ended the search ("error", "exit_code"); a resume goes on past it.
  kSearchFailed,
  // No trial's: a process resumed the search ("changes": the config changes it accepted, one
  // "key: before -> after" each, when there were any).
  kResumed,
};

// The spelling of each event in experiment.jsonl: the only table of it.
const util::NameTable<TrialEvent>& event_names();

// The event of `row`; nullopt when its "event" is missing, not a string, or no event's name.
std::optional<TrialEvent> event_of(const nlohmann::json& row);

// Whether `row` records what the searcher decided or a result it decided by: false for the rows
// of restarts, of a search's end by an error and of its resumes, which a rerun need not repeat.
bool is_decision(const nlohmann::json& row);

// experiment.jsonl: one JSON row per trial event, appended and fsynced as it happens, so that a
// killed experiment, or a machine that loses power, loses at most the row being written.
class ExperimentLog {
 public:
  // Opens `path` for appending, creating it. The complete rows it holds are kept (rows()); a torn
  // last row, left by a kill, is cut off. Throws TrainingError naming the path when it cannot be
  // read or written, and naming the line when a row other than the last is not a JSON object
  // (the file is damaged; nothing after it is dropped).
  explicit ExperimentLog(const std::string& path);
  ~ExperimentLog();
  ExperimentLog(const ExperimentLog&) = delete;
  ExperimentLog& operator=(const ExperimentLog&) = delete;

  // The complete rows the file held when it was opened, in order.
  const std::vector<nlohmann::json>& rows() const { return rows_; }

  // Appends `rows`, each with "time" (seconds since the Unix epoch) added, in one write, and
  // fsyncs the file. Throws TrainingError naming the path on failure (a full disk included).
  void append(std::vector<nlohmann::json> rows);

 private:
  std::string path_;
  std::vector<nlohmann::json> rows_;
  int fd_ = -1;
};

}  // namespace crucible::search
