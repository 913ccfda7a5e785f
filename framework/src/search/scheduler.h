#pragma once

// The searcher of an experiment (grid, random or adaptive ASHA) as a deterministic state
// machine: which trials exist, with which hyperparameters, how far each trains next, and what
// happens after each result. It runs no process; the experiment runner feeds it results.
//
// Its decisions depend only on the config and the results, never on timing. Trials train in
// segments on a virtual clock: a segment of n units that starts at virtual time t ends at t + n,
// and results are taken in the order of the segments' virtual ends (then trial id), whatever
// order the processes really finish in. A search therefore makes the same decisions on any
// machine, at any physical concurrency, and when it is replayed from its log after a kill.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <crucible/config.h>

#include "search/asha.h"
#include "search/experiment_log.h"
#include "search/space.h"

namespace crucible::search {

// One stretch of a trial's training: train trial `trial` until it has trained `length` units
// (of Scheduler::unit()), then validate.
struct Segment {
  int64_t trial = 0;
  int64_t length = 0;
  int64_t ends_at = 0;  // virtual time
};

// What one segment gave.
struct SegmentResult {
  enum class Kind {
    kValidated,  // trained to `length` and validated: `metric`
    kFailed,     // failed after every restart: `error`
    kInvalid,    // the trial rejected its hyperparameters: `error`
  };
  Kind kind = Kind::kValidated;
  int64_t trial = 0;
  // kValidated: units trained (less than the segment's when it ended early); kFailed: the
  // furthest length its run reported before it failed.
  int64_t length = 0;
  double metric = 0;        // kValidated: searcher.metric as the trial reported it
  std::string ended_early;  // kValidated: why the trial stopped itself before the segment's end
  std::string error;        // kFailed, kInvalid
  // kValidated: the best searcher.metric of all the trial's validations so far (those before the
  // segment's end included, whose checkpoints its retention may keep); nullopt: `metric`.
  std::optional<double> best;
};

enum class TrialState { kRunning, kStopped, kCompleted, kFailed, kInvalid };

struct TrialRecord {
  int64_t id = 0;
  nlohmann::json hparams;
  int64_t bracket = 0;
  int64_t length = 0;  // units trained so far (a failed trial: the furthest it reported)
  TrialState state = TrialState::kRunning;
  std::optional<double> best_metric;  // the best searcher.metric it reported
  std::string error;                  // kFailed, kInvalid
};

class Scheduler {
 public:
  // Requires searcher.name grid, random or adaptive_asha; an unset experiment_seed counts as 0.
  // Throws ConfigError naming the place when the search cannot be planned: a grid's numeric
  // space without count, a grid past Grid::kMostPoints, or ASHA brackets (searcher.bracket_rungs)
  // that max_trials cannot fill.
  explicit Scheduler(const ExperimentConfig& config);

  // Creates the first trials. Returns the experiment.jsonl rows of what happened.
  std::vector<nlohmann::json> start();
  // The segments planned and not yet reported, the one whose result comes next first. Empty
  // once the search is over.
  std::vector<Segment> running() const;
  // Takes the result of running().front() (result.trial must be its trial) and returns the
  // rows of what followed: the result itself (validated with the rung decision, failed or
  // invalid), then stopped or completed, then the trials created in freed slots.
  std::vector<nlohmann::json> report(const SegmentResult& result);

  // Starts this scheduler (instead of start()), feeds the results that `log` (the rows of a
  // search's experiment.jsonl, which `where` names) holds back to it, and checks that the log's
  // rows are rows it decided, in its order (a created row with the same first length and
  // hyperparameters). Rows that
  // are no decision (is_decision) are passed over. A log that lacks
  // rows before others (written by a version without this check) is taken as it is. Returns the
  // rows it decided after the log's last one and the log lacks (the search stopped before it
  // recorded them), for the caller to record. Throws TrainingError naming `where` and the row where
  // the log records a row it did not decide, or a result of another trial than the one whose result
  // comes next.
  std::vector<nlohmann::json> replay(const std::vector<nlohmann::json>& log,
                                     const std::string& where);

  // What it runs, in one line: the searcher and its trials (a grid's axes; each adaptive ASHA
  // bracket's trials and rung lengths), and how many run at once.
  std::string plan() const;

  // The unit every length is counted in.
  LengthUnit unit() const { return unit_; }
  // The most trials it has running at once: its brackets' concurrency together.
  int64_t concurrency() const;
  bool smaller_is_better() const { return smaller_is_better_; }
  const std::map<int64_t, TrialRecord>& trials() const { return trials_; }
  // The trial with the best metric (ties: the lower id), if any trial validated.
  std::optional<int64_t> best_trial() const;
  // The result that the first row report() returned for it stands for, or nullopt for a row
  // that is no result (created, stopped, completed, and rows of others). Throws TrainingError
  // naming `where` (the log and row) when a field it reads is missing or of another type.
  static std::optional<SegmentResult> result_of_row(const nlohmann::json& row,
                                                    const std::string& where);

 private:
  // result_of_row, letting nlohmann::json's exceptions out.
  static std::optional<SegmentResult> read_result_row(const nlohmann::json& row);

  struct Bracket {
    int64_t budget = 0;       // trials it creates, invalid ones not counted
    int64_t concurrency = 0;  // trials it runs at once
    int64_t created = 0;      // valid or running trials created
    int64_t active = 0;
    std::vector<int64_t> rung_lengths;
    std::optional<AshaRungs> rungs;  // adaptive ASHA only
  };

  void fill(size_t bracket, std::vector<nlohmann::json>& rows);
  nlohmann::json row(TrialEvent event, const TrialRecord& trial) const;
  void finish(TrialRecord& trial, TrialState state, std::vector<nlohmann::json>& rows);
  int64_t next_length(const Bracket& bracket, int64_t reached) const;
  double ranked(double metric) const;  // smaller is better; NaN is worst

  SearcherName searcher_;
  bool smaller_is_better_ = true;
  uint64_t seed_ = 0;
  std::map<std::string, HyperparameterSpec> space_;
  std::optional<Grid> grid_;  // grid only
  int64_t next_point_ = 0;
  LengthUnit unit_ = LengthUnit::kBatches;
  std::vector<Bracket> brackets_;
  std::map<int64_t, TrialRecord> trials_;
  std::map<int64_t, Segment> segments_;  // by trial
  int64_t now_ = 0;                      // virtual time
  int64_t next_id_ = 1;
  int64_t invalid_ = 0;
  int64_t max_invalid_ = 0;
};

// Where `metric` ranks among searcher metrics, smaller first: the metric when smaller is better,
// else its negation; NaN ranks last (infinity).
double rank_key(double metric, bool smaller_is_better);

// The unit a search counts trial lengths in: adaptive ASHA's time_metric when it has max_time,
// else that of searcher.max_length when set (Determined's older form), else that of max_length;
// adaptive ASHA counts records as batches of global_batch_size.
LengthUnit search_unit(const ExperimentConfig& config);

// The spelling of each trial state in tables and reports, and of each ASHA decision in
// experiment.jsonl's validated rows: the only tables of them.
const util::NameTable<TrialState>& state_names();
const util::NameTable<AshaDecision>& decision_names();

// The event that records a trial ending in `state`; requires a state other than kRunning.
TrialEvent ending_event(TrialState state);
// The state `event` leaves its trial in when the event ends it; nullopt for one that does not.
std::optional<TrialState> state_after(TrialEvent event);

}  // namespace crucible::search
