#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include <crucible/errors.h>
#include <crucible/optim.h>

#include "util/json_number.h"

namespace crucible::lr {

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer optimizer, PlateauOptions options)
    : LRScheduler(std::move(optimizer)), options_(std::move(options)) {
  if (!(options_.factor() > 0 && options_.factor() < 1)) {
    throw Error(
        fmt::format("ReduceLROnPlateau: factor must be in (0, 1), got {}", options_.factor()));
  }
  if (!(options_.threshold() >= 0))
    throw Error(fmt::format("ReduceLROnPlateau: threshold must not be negative, got {}",
                            options_.threshold()));
  const size_t groups = this->optimizer()->param_groups().size();
  if (!options_.min_lrs().empty() && options_.min_lrs().size() != groups) {
    throw Error(fmt::format("ReduceLROnPlateau: min_lrs holds {} floors for {} param groups",
                            options_.min_lrs().size(), groups));
  }
  if (options_.patience() < 0 || options_.cooldown() < 0) {
    throw Error(
        fmt::format("ReduceLROnPlateau: patience and cooldown must not be negative, got {} and {}",
                    options_.patience(), options_.cooldown()));
  }
}

namespace {

// PyTorch's eps: a drop that would change a rate by this much or less is not made.
constexpr double kEps = 1e-8;

// A best value as state() writes it (util::number_json).
double best_from_json(const nlohmann::json& best) {
  const std::optional<double> v = util::number_from_json(best);
  if (!v) throw Error(fmt::format("ReduceLROnPlateau state: best {} is no number", best.dump()));
  return *v;
}

}  // namespace

double ReduceLROnPlateau::rate(double base_lr, int64_t step) const {
  return group_rate(0, base_lr, step);
}

double ReduceLROnPlateau::group_rate(size_t group, double base_lr, int64_t) const {
  const std::vector<double>& floors = options_.min_lrs();
  const double floor = group < floors.size() ? floors[group] : options_.min_lr();
  // One drop at a time, as PyTorch lowers a group's rate: never raised to its floor.
  double rate = base_lr;
  for (int64_t i = 0; i < drops_; ++i) {
    const double lowered = std::max(rate * options_.factor(), floor);
    if (rate - lowered <= kEps) break;  // every later drop would leave it here too
    rate = lowered;
  }
  return rate;
}

void ReduceLROnPlateau::on_validation(const MetricValues& metrics) {
  const double value = validation_metric(metrics, options_.metric(), "ReduceLROnPlateau");
  const double margin = options_.threshold();
  // Before the first improvement the best is the worst value (PyTorch's ±inf), so neither NaN nor
  // that infinity improves on it; NaN never improves.
  const double inf = std::numeric_limits<double>::infinity();
  const double best = best_ ? *best_ : options_.smaller_is_better() ? inf : -inf;
  const bool relative = options_.threshold_mode() == ThresholdMode::kRelative;
  const bool improved = options_.smaller_is_better()
                            ? value < (relative ? best * (1.0 - margin) : best - margin)
                            : value > (relative ? best * (1.0 + margin) : best + margin);
  if (improved) {
    best_ = value;
    bad_validations_ = 0;
  } else {
    ++bad_validations_;
  }
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    bad_validations_ = 0;
  }
  if (bad_validations_ > options_.patience()) {
    ++drops_;
    cooldown_left_ = options_.cooldown();
    bad_validations_ = 0;
  }
}

nlohmann::json ReduceLROnPlateau::state() const {
  nlohmann::json out = LRScheduler::state();
  out["best"] = best_ ? util::number_json(*best_) : nlohmann::json();
  out["bad_validations"] = bad_validations_;
  out["cooldown_left"] = cooldown_left_;
  out["drops"] = drops_;
  return out;
}

void ReduceLROnPlateau::load_state(const nlohmann::json& state) {
  for (const char* key : {"best", "bad_validations", "cooldown_left", "drops"}) {
    if (!state.contains(key)) {
      throw Error(fmt::format("ReduceLROnPlateau state {} lacks {}", state.dump(), key));
    }
  }
  best_ =
      state["best"].is_null() ? std::nullopt : std::optional<double>(best_from_json(state["best"]));
  bad_validations_ = state["bad_validations"].get<int64_t>();
  cooldown_left_ = state["cooldown_left"].get<int64_t>();
  drops_ = state["drops"].get<int64_t>();
  LRScheduler::load_state(state);
}

}  // namespace crucible::lr
