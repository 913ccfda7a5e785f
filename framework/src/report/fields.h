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
#include "util/json_number.h"

namespace crucible::report {

// What util::read_json_lines says of a damaged metrics.jsonl.
inline constexpr const char* kDamageHint =
    "the file is damaged (only a kill's torn last row is passed over)";

// The number `row[key]` as util::number_from_json reads it; NaN when absent or no number.
inline double number_in(const nlohmann::json& row, const char* key) {
  const auto it = row.find(key);
  return it == row.end() ? std::nan("") : util::number_from_json(*it).value_or(std::nan(""));
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

// The metrics of a metrics.jsonl row: each member of its "metrics" object as
// util::numbers_from_json reads it.
inline MetricValues metrics_in(const nlohmann::json& row) {
  const auto it = row.find("metrics");
  return it == row.end() ? MetricValues() : util::numbers_from_json(*it);
}

// Whether searcher metric `a` ranks before `b`, as the searcher ranks them (search::rank_key:
// better first, NaN last).
inline bool better(double a, double b, bool smaller_is_better) {
  return search::rank_key(a, smaller_is_better) < search::rank_key(b, smaller_is_better);
}

}  // namespace crucible::report
