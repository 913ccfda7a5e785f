#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include <crucible/errors.h>
#include <crucible/optim.h>

namespace crucible::lr {

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer optimizer, PlateauOptions options)
    : LRScheduler(std::move(optimizer)), options_(std::move(options)) {
  if (!(options_.factor() > 0 && options_.factor() < 1)) {
    throw Error("ReduceLROnPlateau: factor must be in (0, 1)");
  }
  if (options_.patience() < 0 || options_.cooldown() < 0) {
    throw Error("ReduceLROnPlateau: patience and cooldown must not be negative");
  }
}

double ReduceLROnPlateau::rate(double base_lr, int64_t) const {
  return std::max(base_lr * std::pow(options_.factor(), static_cast<double>(drops_)),
                  options_.min_lr());
}

void ReduceLROnPlateau::on_validation(const MetricValues& metrics) {
  const double value = validation_metric(metrics, options_.metric(), "ReduceLROnPlateau");
  const double margin = options_.threshold();
  const bool improved = !best_ || (options_.smaller_is_better() ? value < *best_ * (1.0 - margin)
                                                                : value > *best_ * (1.0 + margin));
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
  out["best"] = best_ ? nlohmann::json(*best_) : nlohmann::json();
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
  best_ = state["best"].is_null() ? std::nullopt : std::optional<double>(state["best"]);
  bad_validations_ = state["bad_validations"].get<int64_t>();
  cooldown_left_ = state["cooldown_left"].get<int64_t>();
  drops_ = state["drops"].get<int64_t>();
  LRScheduler::load_state(state);
}

}  // namespace crucible::lr
