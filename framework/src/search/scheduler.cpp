#include "search/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <crucible/errors.h>

#include "config/enum_names.h"
#include "config/yaml_reader.h"
#include "search/space.h"
#include "util/error_text.h"
#include "util/json_number.h"
#include "util/name_table.h"

namespace crucible::search {

const util::NameTable<TrialState>& state_names() {
  static const util::NameTable<TrialState> table = {{TrialState::kRunning, "running"},
                                                    {TrialState::kStopped, "stopped"},
                                                    {TrialState::kCompleted, "completed"},
                                                    {TrialState::kFailed, "failed"},
                                                    {TrialState::kInvalid, "invalid"}};
  return table;
}

const util::NameTable<AshaDecision>& decision_names() {
  static const util::NameTable<AshaDecision> table = {{AshaDecision::kContinue, "continue"},
                                                      {AshaDecision::kStop, "stop"},
                                                      {AshaDecision::kDone, "done"}};
  return table;
}

TrialEvent ending_event(TrialState state) {
  switch (state) {
    case TrialState::kStopped:
      return TrialEvent::kStopped;
    case TrialState::kCompleted:
      return TrialEvent::kCompleted;
    case TrialState::kFailed:
      return TrialEvent::kFailed;
    case TrialState::kInvalid:
      return TrialEvent::kInvalid;
    case TrialState::kRunning:
      break;
  }
  TORCH_INTERNAL_ASSERT(false, "ending_event: a running trial has not ended");
}

std::optional<TrialState> state_after(TrialEvent event) {
  for (const TrialState state :
       {TrialState::kStopped, TrialState::kCompleted, TrialState::kFailed, TrialState::kInvalid}) {
    if (ending_event(state) == event) return state;
  }
  return std::nullopt;
}

double rank_key(double metric, bool smaller_is_better) {
  if (std::isnan(metric)) return std::numeric_limits<double>::infinity();
  return smaller_is_better ? metric : -metric;
}

namespace {

// The length adaptive ASHA's older form gives (searcher.max_length, else the trials' own), its
// records converted to batches of global_batch_size, rounded up as a run counts them.
Length asha_length(const ExperimentConfig& config) {
  const SearcherConfig& s = config.searcher;
  Length length = s.max_length.value > 0 ? s.max_length : config.max_length;
  if (length.unit == LengthUnit::kRecords) {
    const int64_t batch = config.global_batch_size();
    length = {LengthUnit::kBatches, (length.value + batch - 1) / batch};
  }
  return length;
}

}  // namespace

LengthUnit search_unit(const ExperimentConfig& config) {
  const SearcherConfig& s = config.searcher;
  if (s.name == SearcherName::kAdaptiveAsha) {
    if (s.max_time <= 0) return asha_length(config).unit;
    const auto unit = config::names<LengthUnit>().parse(s.time_metric);
    TORCH_INTERNAL_ASSERT(unit, "time_metric ", s.time_metric, " passed config validation");
    return *unit;
  }
  return (s.max_length.value > 0 ? s.max_length : config.max_length).unit;
}

Scheduler::Scheduler(const ExperimentConfig& config)
    : searcher_(config.searcher.name),
      smaller_is_better_(config.searcher.smaller_is_better),
      seed_(config.reproducibility.experiment_seed.value_or(0)),
      space_(config.hyperparameters),
      unit_(search_unit(config)) {
  const SearcherConfig& s = config.searcher;
  TORCH_INTERNAL_ASSERT(searcher_ != SearcherName::kSingle,
                        "Scheduler: searcher single is not a search");
  max_invalid_ = s.max_trials;
  if (searcher_ != SearcherName::kAdaptiveAsha) {
    // One segment per trial, of the trial's whole length.
    const Length length = s.max_length.value > 0 ? s.max_length : config.max_length;
    Bracket b;
    if (searcher_ == SearcherName::kGrid) {
      for (const auto& [name, spec] : space_) {
        try {
          grid_points(name, spec);
        } catch (const ConfigError& e) {
          const std::string key = "hyperparameters." + name;
          throw ConfigError(fmt::format("{}: {}", config::key_place(config, key), e.what()));
        }
      }
      try {
        grid_.emplace(space_);
      } catch (const ConfigError& e) {
        throw ConfigError(
            fmt::format("{}: {}", config::key_place(config, "hyperparameters"), e.what()));
      }
      b.budget = grid_->size();
      max_invalid_ = 0;  // a grid point is not replaced
    } else {
      b.budget = s.max_trials;
    }
    b.concurrency =
        s.max_concurrent_trials == 0 ? b.budget : std::min(s.max_concurrent_trials, b.budget);
    b.rung_lengths = {length.value};
    brackets_.push_back(std::move(b));
    return;
  }
  auto o = AshaOptions()
               .max_trials(s.max_trials)
               .divisor(s.divisor)
               .max_rungs(s.max_rungs)
               .max_concurrent_trials(s.max_concurrent_trials)
               .mode(s.mode)
               .max_time(s.max_time > 0 ? s.max_time : asha_length(config).value);
  o.brackets(s.bracket_rungs);
  std::vector<AshaBracket> planned;
  try {
    planned = asha_brackets(o);
  } catch (const ConfigError& e) {
    throw ConfigError(
        fmt::format("{}: {}", config::key_place(config, "searcher.bracket_rungs"), e.what()));
  }
  for (const AshaBracket& a : planned) {
    Bracket b;
    b.budget = a.trials;
    b.concurrency = a.concurrency;
    b.rung_lengths = a.rung_lengths;
    b.rungs.emplace(a.rung_lengths, s.divisor);
    brackets_.push_back(std::move(b));
  }
}

std::vector<nlohmann::json> Scheduler::start() {
  std::vector<nlohmann::json> rows;
  for (size_t b = 0; b < brackets_.size(); ++b) fill(b, rows);
  return rows;
}

std::vector<Segment> Scheduler::running() const {
  std::vector<Segment> out;
  for (const auto& [trial, segment] : segments_) out.push_back(segment);
  std::sort(out.begin(), out.end(), [](const Segment& a, const Segment& b) {
    return a.ends_at != b.ends_at ? a.ends_at < b.ends_at : a.trial < b.trial;
  });
  return out;
}

void Scheduler::fill(size_t index, std::vector<nlohmann::json>& rows) {
  Bracket& b = brackets_[index];
  while (b.active < b.concurrency && b.created < b.budget) {
    TrialRecord t;
    t.id = next_id_++;
    t.bracket = static_cast<int64_t>(index);
    t.hparams = grid_ ? grid_->point(next_point_++) : sample(space_, seed_, t.id);
    ++b.created;
    ++b.active;
    const int64_t length = b.rung_lengths.front();
    segments_[t.id] = Segment{t.id, length, now_ + length};
    nlohmann::json r = row(TrialEvent::kCreated, t);
    r["length"] = length;
    rows.push_back(std::move(r));
    trials_.emplace(t.id, std::move(t));
  }
}

nlohmann::json Scheduler::row(TrialEvent event, const TrialRecord& t) const {
  nlohmann::json r = {
      {"event", event_names().name(event)}, {"trial", t.id}, {"hparams", t.hparams}};
  if (brackets_.size() > 1 || brackets_.front().rungs) r["bracket"] = t.bracket;
  return r;
}

double Scheduler::ranked(double metric) const { return rank_key(metric, smaller_is_better_); }

int64_t Scheduler::next_length(const Bracket& b, int64_t reached) const {
  for (const int64_t length : b.rung_lengths) {
    if (length > reached) return length;
  }
  return b.rung_lengths.back();
}

void Scheduler::finish(TrialRecord& t, TrialState state, std::vector<nlohmann::json>& rows) {
  t.state = state;
  Bracket& b = brackets_[static_cast<size_t>(t.bracket)];
  --b.active;
  if (state == TrialState::kInvalid) {
    if (invalid_ < max_invalid_) --b.created;  // replaced: it does not count
    ++invalid_;
  }
  nlohmann::json r = row(ending_event(state), t);
  r["length"] = t.length;
  if (t.best_metric) r["best_metric"] = util::number_json(*t.best_metric);
  if (!t.error.empty()) r["error"] = t.error;
  rows.push_back(std::move(r));
  fill(static_cast<size_t>(t.bracket), rows);
}

std::vector<nlohmann::json> Scheduler::report(const SegmentResult& result) {
  const std::vector<Segment> order = running();
  TORCH_INTERNAL_ASSERT(!order.empty() && order.front().trial == result.trial,
                        "Scheduler: the result of trial ", result.trial,
                        " is not the one expected next");
  const Segment segment = order.front();
  segments_.erase(segment.trial);
  now_ = segment.ends_at;
  TrialRecord& t = trials_.at(segment.trial);
  Bracket& b = brackets_[static_cast<size_t>(t.bracket)];
  std::vector<nlohmann::json> rows;

  if (result.kind == SegmentResult::Kind::kInvalid) {
    if (b.rungs) b.rungs->remove(t.id);
    t.error = result.error;
    finish(t, TrialState::kInvalid, rows);
    return rows;
  }
  if (result.kind == SegmentResult::Kind::kFailed) {
    // Recorded with the worst metric, so that it takes no place in a rung from another trial.
    if (b.rungs) b.rungs->record(t.id, segment.length, std::numeric_limits<double>::infinity());
    t.length = std::max(t.length, result.length);
    t.error = result.error;
    finish(t, TrialState::kFailed, rows);
    return rows;
  }

  t.length = result.length;
  for (const double m : {result.metric, result.best.value_or(result.metric)}) {
    if (!t.best_metric || ranked(m) < ranked(*t.best_metric)) t.best_metric = m;
  }
  AshaDecision decision = AshaDecision::kDone;
  if (b.rungs) {
    decision = b.rungs->record(t.id, result.length, ranked(result.metric));
  } else if (result.length < segment.length) {
    decision = AshaDecision::kContinue;
  }
  if (!result.ended_early.empty()) decision = AshaDecision::kDone;
  nlohmann::json r = row(TrialEvent::kValidated, t);
  r["length"] = result.length;
  r["metric"] = util::number_json(result.metric);
  if (result.best) r["best_metric"] = util::number_json(*result.best);
  if (b.rungs) {
    int64_t rung = -1;
    for (const int64_t length : b.rung_lengths) rung += length <= result.length ? 1 : 0;
    r["rung"] = rung;
  }
  r["decision"] = decision_names().name(decision);
  if (!result.ended_early.empty()) r["ended_early"] = result.ended_early;
  rows.push_back(std::move(r));

  if (decision == AshaDecision::kContinue) {
    const int64_t length = next_length(b, result.length);
    segments_[t.id] = Segment{t.id, length, now_ + length - result.length};
    return rows;
  }
  finish(t, decision == AshaDecision::kStop ? TrialState::kStopped : TrialState::kCompleted, rows);
  return rows;
}

namespace {

// Whether JSON values `a` and `b` are equal, numbers that are not both integers within a relative
// 1e-12 (a log-scale draw's std::pow may differ in its last bit between C libraries).
bool near(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_number() && b.is_number() && !(a.is_number_integer() && b.is_number_integer())) {
    const double x = a.get<double>(), y = b.get<double>();
    return x == y || std::abs(x - y) <= 1e-12 * std::max(std::abs(x), std::abs(y));
  }
  if (a.is_object() && b.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto& [key, value] : a.items()) {
      if (!b.contains(key) || !near(value, b[key])) return false;
    }
    return true;
  }
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!near(a[i], b[i])) return false;
    }
    return true;
  }
  return a == b;
}

// Whether hyperparameters `recorded` (read back from experiment.jsonl) are `drawn`, as JSON text
// gives them back (a NaN or infinity is written null).
bool same_hparams(const nlohmann::json& recorded, const nlohmann::json& drawn) {
  return near(nlohmann::json::parse(recorded.dump()), nlohmann::json::parse(drawn.dump()));
}

}  // namespace

std::vector<nlohmann::json> Scheduler::replay(const std::vector<nlohmann::json>& log,
                                              const std::string& where) {
  std::vector<nlohmann::json> decided = start();
  size_t recorded = 0;  // decided[0, recorded) are in the log or were passed over
  const auto check_recorded = [&](const nlohmann::json& row, size_t line) {
    // A created row's first length too: a search planned otherwise (another unit or other
    // rungs) does not match it.
    const auto same = [&](const nlohmann::json& d) {
      return event_of(d) == event_of(row) &&
             d.value("trial", int64_t{-1}) == row.value("trial", int64_t{-1}) &&
             (event_of(d) != TrialEvent::kCreated || !row.contains("length") ||
              d.value("length", int64_t{-1}) == row.value("length", int64_t{-2}));
    };
    size_t k = recorded;
    while (k < decided.size() && !same(decided[k])) ++k;
    if (k == decided.size()) {
      throw TrainingError(fmt::format(
          "{}, row {}, does not match this search: the searcher decided no such row at that point",
          where, line));
    }
    // The trials' hyperparameters are as the searcher draws them from the space it was given.
    if (event_of(row) == TrialEvent::kCreated && row.contains("hparams") &&
        !same_hparams(row["hparams"], decided[k]["hparams"])) {
      throw TrainingError(fmt::format(
          "{}, row {}, does not match this search: it created trial {} with hyperparameters {}, "
          "and this search's space gives it {} (was `hyperparameters` of the experiment's "
          "config.yaml changed?)",
          where, line, row.value("trial", int64_t{-1}), row["hparams"].dump(),
          decided[k]["hparams"].dump()));
    }
    recorded = k + 1;
  };
  for (size_t i = 0; i < log.size(); ++i) {
    const nlohmann::json& row = log[i];
    // Checks the row's event and trial first.
    const auto r = result_of_row(row, fmt::format("{}, row {}", where, i + 1));
    if (!is_decision(row)) continue;
    if (!r) {
      check_recorded(row, i + 1);
      continue;
    }
    const auto order = running();
    if (order.empty() || order.front().trial != r->trial) {
      throw TrainingError(fmt::format(
          "{} does not match this search: it records a result of trial {} where the searcher "
          "expects {}",
          where, r->trial,
          order.empty() ? std::string("none") : "trial " + std::to_string(order.front().trial)));
    }
    for (auto& out : report(*r)) decided.push_back(std::move(out));
    check_recorded(row, i + 1);
  }
  return {decided.begin() + static_cast<std::ptrdiff_t>(recorded), decided.end()};
}

std::string Scheduler::plan() const {
  const std::string searcher = config::names<SearcherName>().name(searcher_);
  const char* unit = config::names<LengthUnit>().name(unit_);
  const auto trials = [](int64_t n) { return fmt::format("{} trial{}", n, n == 1 ? "" : "s"); };
  if (!brackets_.front().rungs) {
    const Bracket& b = brackets_.front();
    const std::string shape = grid_ ? grid_->shape() : "";
    return fmt::format("{}: {}{} of {} {}, up to {} at once", searcher, trials(b.budget),
                       shape.empty() ? "" : " (" + shape + ")", b.rung_lengths.front(), unit,
                       b.concurrency);
  }
  int64_t total = 0;
  for (const Bracket& b : brackets_) total += b.budget;
  std::string out = fmt::format("{}: {} in {} bracket{}", searcher, trials(total), brackets_.size(),
                                brackets_.size() == 1 ? "" : "s");
  for (size_t i = 0; i < brackets_.size(); ++i) {
    const Bracket& b = brackets_[i];
    out += fmt::format("{} {} with rungs at {} {}, up to {} at once", i == 0 ? ":" : ";",
                       trials(b.budget), fmt::join(b.rung_lengths, ", "), unit, b.concurrency);
  }
  return out;
}

int64_t Scheduler::concurrency() const {
  int64_t n = 0;
  for (const Bracket& b : brackets_) n += b.concurrency;
  return n;
}

std::optional<int64_t> Scheduler::best_trial() const {
  std::optional<int64_t> best;
  for (const auto& [id, t] : trials_) {
    if (!t.best_metric) continue;
    if (!best || ranked(*t.best_metric) < ranked(*trials_.at(*best).best_metric)) best = id;
  }
  return best;
}

std::optional<SegmentResult> Scheduler::result_of_row(const nlohmann::json& row,
                                                      const std::string& where) {
  const auto not_a_row = [&](const std::exception& e) {
    return TrainingError(fmt::format("{}: {} is not a row of a search's log ({})", where,
                                     row.dump(), util::first_line(e)));
  };
  try {
    return read_result_row(row);
  } catch (const nlohmann::json::exception& e) {
    throw not_a_row(e);
  } catch (const TrainingError& e) {
    throw not_a_row(e);
  }
}

std::optional<SegmentResult> Scheduler::read_result_row(const nlohmann::json& row) {
  // An integer field; a float would convert with undefined behaviour when out of range.
  const auto integer = [&](const char* key, std::optional<int64_t> fallback) {
    const auto it = row.find(key);
    if (it == row.end() && fallback) return *fallback;
    if (it == row.end() || !it->is_number_integer()) {
      throw TrainingError(fmt::format("'{}' is not an integer", key));
    }
    return it->get<int64_t>();
  };
  // A metric, as util::number_json writes it.
  const auto number = [&](const nlohmann::json& value, const char* key) {
    const std::optional<double> v = util::number_from_json(value);
    if (!v) throw TrainingError(fmt::format("'{}' is not a number", key));
    return *v;
  };
  if (row.contains("event") && !row.at("event").is_string()) {
    throw TrainingError("'event' is not a string");
  }
  const std::optional<TrialEvent> event = event_of(row);
  SegmentResult r;
  r.trial = integer("trial", 0);
  if (event == TrialEvent::kValidated) {
    r.kind = SegmentResult::Kind::kValidated;
    r.length = integer("length", std::nullopt);
    r.metric = number(row.at("metric"), "metric");
    // Logs written before the trial's best was recorded have none: the metric stands for it.
    if (const auto best = row.find("best_metric"); best != row.end()) {
      r.best = number(*best, "best_metric");
    }
    r.ended_early = row.value("ended_early", "");
    return r;
  }
  if (event == TrialEvent::kFailed || event == TrialEvent::kInvalid) {
    r.kind =
        event == TrialEvent::kFailed ? SegmentResult::Kind::kFailed : SegmentResult::Kind::kInvalid;
    if (event == TrialEvent::kFailed) r.length = integer("length", 0);
    r.error = row.value("error", "");
    return r;
  }
  return std::nullopt;
}

}  // namespace crucible::search
