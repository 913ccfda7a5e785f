#pragma once

// Hyperparameter spaces as searchers use them (../shared/SEARCH.md): grid points and random
// draws.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <crucible/config.h>

namespace crucible::search {

using Space = std::map<std::string, HyperparameterSpec>;

// The grid points of one hyperparameter: a constant's value; a categorical's vals; count points
// spaced linearly from minval to maxval (count 1: the midpoint), in the exponent for log (the
// value is base^x); int points rounded, duplicates dropped, so at most the range's size. Throws
// ConfigError "hyperparameters.<name>: ..." when a numeric space has no count.
std::vector<nlohmann::json> grid_points(const std::string& name, const HyperparameterSpec& spec);

// The cartesian product of every hyperparameter's grid points, as hyperparameter objects; the
// first name (in name order) varies slowest.
std::vector<nlohmann::json> grid(const Space& space);

// One draw of every hyperparameter for trial `trial_id` of an experiment seeded `seed`: from a
// generator seeded by both alone, so a trial's draw does not depend on other trials. int:
// uniform over minval..maxval; double: uniform in [minval, maxval); log: base^u, u uniform in
// [minval, maxval); categorical: one of vals; a constant: its value.
nlohmann::json sample(const Space& space, uint64_t seed, int64_t trial_id);

}  // namespace crucible::search
