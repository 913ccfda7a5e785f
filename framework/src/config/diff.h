#pragma once

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

}  // namespace crucible::config
