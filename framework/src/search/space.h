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
// ConfigError "hyperparameters.<name>: ..." when a numeric space has no count, or a count above
// Grid::kMostPoints (an int's count above its range's size is that size).
std::vector<nlohmann::json> grid_points(const std::string& name, const HyperparameterSpec& spec);

// The cartesian product of every hyperparameter's grid points, as hyperparameter objects; the
// first name (in name order) varies slowest. Points are made when asked for, so a large grid
// holds only its axes.
class Grid {
 public:
  // The most points a grid may have: far more trials than one machine's search can run.
  static constexpr int64_t kMostPoints = 1000000;

  // Throws ConfigError as grid_points does, and, when the product has more than kMostPoints
  // points, "hyperparameters: the grid's points (a: 3 × b: 4 ...) are more than ..." naming each
  // axis's size.
  explicit Grid(const Space& space);

  int64_t size() const { return size_; }
  // Point `index`; requires 0 <= index < size().
  nlohmann::json point(int64_t index) const;
  // Each searched hyperparameter's point count, "a: 3 × b: 4"; "" when no hyperparameter has
  // more than one point.
  std::string shape() const;

 private:
  std::vector<std::pair<std::string, std::vector<nlohmann::json>>> axes_;
  int64_t size_ = 1;
};

// One draw of every hyperparameter for trial `trial_id` of an experiment seeded `seed`: from a
// generator seeded by both alone, so a trial's draw does not depend on other trials. int:
// uniform over minval..maxval; double: uniform in [minval, maxval); log: base^u, u uniform in
// [minval, maxval); categorical: one of vals; a constant: its value.
nlohmann::json sample(const Space& space, uint64_t seed, int64_t trial_id);

}  // namespace crucible::search
