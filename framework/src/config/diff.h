#pragma once

#include <functional>
#include <string>
#include <vector>

#include <crucible/config.h>

namespace crucible::config {

// One key whose value differs between two configs: "max_length.epochs: 4 -> 8".
struct Change {
  std::string key;
  std::string before;
  std::string after;
};

// The keys whose resolved values differ (defaults included), in key order.
std::vector<Change> diff(const ExperimentConfig& before, const ExperimentConfig& after);

// Whether changing `key` keeps a resumed run meaningful: lengths, periods, reporting and
// retention, but nothing that alters what has been trained so far.
bool is_safe_change(const std::string& key);
// Whether changing `key` keeps a resumed search meaningful too: is_safe_change's keys except
// max_length, which sets the lengths of its trials and rungs.
bool is_safe_search_change(const std::string& key);

// "key: before -> after".
std::string change_text(const Change& change);

// `changes` one per line, each line "\n  " and its change_text, those that `safe` refuses marked
// "  (unsafe)".
std::string change_list(const std::vector<Change>& changes,
                        const std::function<bool(const std::string& key)>& safe);

// The `--set` texts ("KEY=VALUE", the value as one line of YAML) that give `after`'s values to
// the schema keys that `changes` (a diff into `after`) touch and `pick` accepts: one per key, a
// length or period whole; "KEY=null" for a key that `after` leaves out (its default).
std::vector<std::string> overrides_for(const std::vector<Change>& changes,
                                       const ExperimentConfig& after,
                                       const std::function<bool(const std::string& key)>& pick);

}  // namespace crucible::config
