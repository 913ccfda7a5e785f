#include <cmath>

#include <fmt/format.h>

#include <crucible/early_stopping.h>
#include <crucible/errors.h>
#include <crucible/trial_context.h>

namespace crucible {

EarlyStopping::EarlyStopping(TrialContext& ctx, std::string metric, bool smaller_is_better,
                             int64_t patience, double min_delta)
    : ctx_(ctx),
      metric_(std::move(metric)),
      smaller_is_better_(smaller_is_better),
      patience_(patience),
      min_delta_(min_delta) {
  if (metric_.empty()) throw Error("EarlyStopping: the metric name is empty");
  if (patience_ < 0 || !(min_delta_ >= 0)) {
    throw Error(
        fmt::format("EarlyStopping: patience and min_delta must not be negative, got {} and {}",
                    patience_, min_delta_));
  }
}

void EarlyStopping::on_validation_end(const MetricValues& metrics) {
  const double value = validation_metric(metrics, metric_, "early stopping");
  const bool improved =
      !best_ || (smaller_is_better_ ? value < *best_ - min_delta_ : value > *best_ + min_delta_);
  if (improved) {
    best_ = value;
    bad_validations_ = 0;
    return;
  }
  ++bad_validations_;
  if (bad_validations_ >= patience_) {
    ctx_.set_stop_requested(fmt::format(
        "early stopping: {} did not improve on its best {} by more than {} in {} validation(s)",
        metric_, *best_, min_delta_, bad_validations_));
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
  best_ = has_best.item<bool>() ? std::optional<double>(best.item<double>()) : std::nullopt;
  bad_validations_ = bad.item<int64_t>();
}

}  // namespace crucible
