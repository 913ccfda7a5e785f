#pragma once

// Reading the fields of rows that a run or a search wrote (metrics.jsonl, experiment.jsonl) for a
// report, which shows what is there and passes over what is not.

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include <crucible/metrics.h>

#include "search/scheduler.h"

namespace crucible::report {

// The number `row[key]`; NaN when absent or not a number (a NaN metric is written as null).
inline double number_in(const nlohmann::json& row, const char* key) {
  const auto it = row.find(key);
  return it != row.end() && it->is_number() ? it->get<double>() : std::nan("");
}

// The integer `row[key]`, or nullopt when absent or not an integer.
inline std::optional<int64_t> integer_in(const nlohmann::json& row, const char* key) {
  const auto it = row.find(key);
  if (it == row.end() || !it->is_number_integer()) return std::nullopt;
  return it->get<int64_t>();
}

// The string `row[key]`, or "" when absent or not a string.
inline std::string text_in(const nlohmann::json& row, const char* key) {
  const auto it = row.find(key);
  return it != row.end() && it->is_string() ? it->get<std::string>() : "";
}

// The metrics of a metrics.jsonl row: each member of its "metrics" object, NaN where not a number.
inline MetricValues metrics_in(const nlohmann::json& row) {
  MetricValues out;
  const auto it = row.find("metrics");
  if (it == row.end() || !it->is_object()) return out;
  for (const auto& [name, value] : it->items()) {
    out[name] = value.is_number() ? value.get<double>() : std::nan("");
  }
  return out;
}

// Whether searcher metric `a` ranks before `b`, as the searcher ranks them (search::rank_key:
// better first, NaN last).
inline bool better(double a, double b, bool smaller_is_better) {
  return search::rank_key(a, smaller_is_better) < search::rank_key(b, smaller_is_better);
}

}  // namespace crucible::report
