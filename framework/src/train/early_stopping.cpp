#include <cmath>

#include <fmt/format.h>

#include <crucible/early_stopping.h>
#include <crucible/errors.h>
#include <crucible/trial_context.h>

namespace crucible {

EarlyStopping::EarlyStopping(TrialContext& ctx, EarlyStoppingOptions options)
    : ctx_(ctx), options_(std::move(options)) {
  if (options_.metric().empty()) throw Error("EarlyStopping: the metric name is empty");
  if (options_.patience() < 0 || !(options_.min_delta() >= 0)) {
    throw Error(
        fmt::format("EarlyStopping: patience and min_delta must not be negative, got {} and {}",
                    options_.patience(), options_.min_delta()));
  }
}

void EarlyStopping::on_validation_end(const MetricValues& metrics) {
  const double value = validation_metric(metrics, options_.metric(), "early stopping");
  const double delta = options_.min_delta();
  // A NaN is no measure: it never improves, and the first number after it can.
  const bool improved =
      !std::isnan(value) &&
      (!best_ || (options_.smaller_is_better() ? value < *best_ - delta : value > *best_ + delta));
  if (improved) {
    best_ = value;
    bad_validations_ = 0;
    return;
  }
  ++bad_validations_;
  if (bad_validations_ >= options_.patience()) {
    ctx_.set_stop_requested(
        best_ ? fmt::format("early stopping: {} did not improve on its best {} by more than {} in "
                            "{} validation(s)",
                            options_.metric(), *best_, delta, bad_validations_)
              : fmt::format("early stopping: {} was NaN in each of {} validation(s)",
                            options_.metric(), bad_validations_));
  }
}

void EarlyStopping::save_state(torch::serialize::OutputArchive& archive) {
  archive.write("best", torch::tensor(best_.value_or(std::nan("")), torch::kDouble));
  archive.write("has_best", torch::tensor(best_.has_value()));
  archive.write("bad_validations", torch::tensor(bad_validations_));
}

void EarlyStopping::load_state(torch::serialize::InputArchive& archive) {
  torch::Tensor best, has_best, bad;
  archive.read("best", best);
  archive.read("has_best", has_best);
  archive.read("bad_validations", bad);
  // A NaN best (saved by a version that took one) is no best.
  const double saved = best.item<double>();
  best_ = has_best.item<bool>() && !std::isnan(saved) ? std::optional<double>(saved) : std::nullopt;
  bad_validations_ = bad.item<int64_t>();
}

}  // namespace crucible
