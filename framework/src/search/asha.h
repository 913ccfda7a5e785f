#pragma once

// Adaptive ASHA's arithmetic, as ../shared/SEARCH.md gives Determined's: rungs, brackets, their
// trials, concurrency and rung lengths, and the stop decision at each validation.

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include <torch/arg.h>

#include <crucible/config.h>

namespace crucible::search {

struct AshaOptions {
  TORCH_ARG(int64_t, max_trials) = 16;  // N
  TORCH_ARG(int64_t, max_time) = 1000;  // T, in the time metric's units
  TORCH_ARG(int64_t, divisor) = 4;      // d
  TORCH_ARG(int64_t, max_rungs) = 5;
  TORCH_ARG(int64_t, max_concurrent_trials) = 16;  // C; 0 = no limit
  TORCH_ARG(AshaMode, mode) = AshaMode::kStandard;
  TORCH_ARG(std::optional<int64_t>, bracket_rungs);  // overrides the computed rung count
  // Each bracket's rung count (searcher.bracket_rungs), in place of those mode makes; empty:
  // mode's. When set, bracket_rungs is not read.
  TORCH_ARG(std::vector<int64_t>, brackets);
};

struct AshaBracket {
  int64_t rungs = 0;
  int64_t trials = 0;
  int64_t concurrency = 0;
  std::vector<int64_t> rung_lengths;  // units a trial trains to reach each rung; the last is T
};

// R = min(max_rungs, floor(ln T / ln d) + 1, floor(ln N / ln d) + 1), or bracket_rungs, or the
// most of brackets.
int64_t asha_rungs(const AshaOptions& options);

// The brackets (`brackets`, else mode_brackets(mode, asha_rungs)), most rungs first, with their
// trials (summing to max_trials), concurrency and rung lengths. Throws ConfigError naming
// searcher.bracket_rungs when there are more brackets than max_trials, or when the other
// brackets' shares leave the first no trial.
std::vector<AshaBracket> asha_brackets(const AshaOptions& options);

// What a trial does after a validation.
enum class AshaDecision {
  kContinue,  // train on
  kStop,      // stopped early: its metric is not in the top 1/d of a rung it reached
  kDone,      // it reached the top rung
};

// The rungs of one bracket and the trials in them.
class AshaRungs {
 public:
  AshaRungs(std::vector<int64_t> rung_lengths, int64_t divisor);

  // Records that trial `trial` validated after `length` units with `metric` (smaller is better;
  // the caller negates a larger-is-better metric). Walking up from the trial's current rung, the
  // metric joins every rung whose length it reached, in sorted order (before equal values); the
  // top rung finishes the trial, and in any other the trial stops when its position is at least
  // max(n / d, 1), n being the rung's size with it.
  AshaDecision record(int64_t trial, int64_t length, double metric);
  // Removes `trial`'s metrics from every rung (a trial whose hyperparameters were invalid).
  void remove(int64_t trial);

  // The metrics in rung `i`, sorted.
  std::vector<double> rung(size_t i) const;

 private:
  struct Entry {
    double metric;
    int64_t trial;
  };
  std::vector<int64_t> lengths_;
  int64_t divisor_;
  std::vector<std::vector<Entry>> rungs_;
  std::map<int64_t, size_t> next_rung_;  // per trial, the first rung it has not joined
};

}  // namespace crucible::search
