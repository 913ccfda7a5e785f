#include "search/summary.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include <crucible/json_value.h>
#include <crucible/metrics.h>

#include "checkpoint/checkpoint.h"
#include "util/file_system.h"
#include "util/json_number.h"
#include "util/number_text.h"

namespace crucible::search {
namespace {

std::string number(const nlohmann::json& value) {
  return util::number_text(util::number_from_json(value).value_or(std::nan("")), 6);
}

}  // namespace

std::string describe_row(const nlohmann::json& row, const std::string& metric,
                         const std::string& unit) {
  // An integer field; a float would convert with undefined behaviour when out of range.
  const auto integer = [&](const char* key) {
    return detail::json_as<int64_t>(row.at(key), std::string("'") + key + "'");
  };
  const std::optional<TrialEvent> event = event_of(row);
  const int64_t trial = row.contains("trial") ? integer("trial") : 0;
  if (event == TrialEvent::kCreated) {
    return fmt::format(
        "trial {} created{}: {}", trial,
        row.contains("bracket") ? fmt::format(" in bracket {}", integer("bracket")) : "",
        row.at("hparams").dump());
  }
  if (event == TrialEvent::kValidated) {
    return fmt::format(
        "trial {}: {} {} at {} {}{}: {}{}", trial, metric, number(row.at("metric")),
        integer("length"), unit,
        row.contains("rung") ? fmt::format(", rung {}", integer("rung")) : "",
        row.at("decision").get<std::string>(),
        row.contains("ended_early") ? " (" + row.at("ended_early").get<std::string>() + ")" : "");
  }
  if (event == TrialEvent::kFailed || event == TrialEvent::kInvalid ||
      event == TrialEvent::kRestarted) {
    const std::string what =
        event == TrialEvent::kFailed    ? "failed"
        : event == TrialEvent::kInvalid ? "rejected its hyperparameters (replaced)"
        : !uses_a_restart(row)
            ? std::string("restarted after a stop from outside the search (no restart used up)")
            : fmt::format("restarted ({} of {})", row.contains("restart") ? integer("restart") : 0,
                          row.contains("max_restarts") ? integer("max_restarts") : 0);
    return fmt::format("trial {} {}: {}", trial, what, row.value("error", ""));
  }
  if (event == TrialEvent::kSearchFailed) {
    return fmt::format("the search ended with an error: {}", row.value("error", ""));
  }
  if (event == TrialEvent::kResumed) {
    std::string changes;
    for (const auto& c : row.value("changes", nlohmann::json::array())) {
      if (c.is_string()) changes += "\n  " + c.get<std::string>();
    }
    return changes.empty() ? "the search resumed"
                           : "the search resumed with config changes:" + changes;
  }
  return fmt::format("trial {} {}", trial, row.value("event", ""));
}

bool uses_a_restart(const nlohmann::json& row) {
  return event_of(row) == TrialEvent::kRestarted && !row.value("stopped", false);
}

std::string summary_table(const Scheduler& scheduler, const std::string& metric) {
  std::vector<const TrialRecord*> rows;
  for (const auto& [id, t] : scheduler.trials()) rows.push_back(&t);
  const bool smaller = scheduler.smaller_is_better();
  std::stable_sort(rows.begin(), rows.end(), [&](const TrialRecord* a, const TrialRecord* b) {
    if (a->best_metric.has_value() != b->best_metric.has_value()) return a->best_metric.has_value();
    if (!a->best_metric) return false;
    return rank_key(*a->best_metric, smaller) < rank_key(*b->best_metric, smaller);
  });
  size_t metric_width = std::max<size_t>(metric.size(), 9);
  std::string out = fmt::format("{:>5}  {:<9}  {:>{}}  {:>8}  {}\n", "TRIAL", "STATE", metric,
                                metric_width, "LENGTH", "HYPERPARAMETERS");
  for (const TrialRecord* t : rows) {
    out += fmt::format("{:>5}  {:<9}  {:>{}}  {:>8}  {}\n", t->id, state_names().name(t->state),
                       t->best_metric ? util::number_text(*t->best_metric, 6) : "-", metric_width,
                       t->length, t->hparams.dump());
  }
  return out;
}

std::string best_checkpoint(const std::string& run_dir, const std::string& metric,
                            bool smaller_is_better) {
  std::string best;
  double best_value = 0;
  for (const std::string& dir : checkpoint::list(run_dir)) {
    MetricValues values;
    try {
      values = checkpoint::metadata(dir).validation;
    } catch (const checkpoint::DamagedCheckpoint&) {
      if (!util::exists(dir)) continue;  // deleted since list() by the running trial's retention
      throw;
    }
    if (values.empty()) continue;
    const double v = validation_metric(values, metric, "searcher.metric");
    if (std::isnan(v)) continue;
    if (best.empty() || (smaller_is_better ? v < best_value : v > best_value)) {
      best = dir;
      best_value = v;
    }
  }
  return best;
}

}  // namespace crucible::search
