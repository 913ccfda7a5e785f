#include <cmath>

#include <fmt/format.h>

#include <crucible/errors.h>
#include <crucible/optim.h>

namespace crucible::lr {
namespace {

constexpr double kPi = 3.14159265358979323846;

// From `high` at t = 0 down to `low` at t = 1 along half a cosine.
double cosine_between(double high, double low, double t) {
  return low + (high - low) * (1.0 + std::cos(kPi * t)) / 2.0;
}

void require_positive(int64_t value, const char* what) {
  if (value <= 0) throw Error(std::string(what) + " must be positive");
}

}  // namespace

CosineAnnealingLR::CosineAnnealingLR(Optimizer optimizer, int64_t t_max, double eta_min)
    : LRScheduler(std::move(optimizer)), t_max_(t_max), eta_min_(eta_min) {
  require_positive(t_max_, "CosineAnnealingLR: t_max");
}

double CosineAnnealingLR::rate(double base_lr, int64_t step) const {
  return cosine_between(base_lr, eta_min_, static_cast<double>(step) / static_cast<double>(t_max_));
}

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer optimizer, int64_t t_0,
                                                         int64_t t_mult, double eta_min)
    : LRScheduler(std::move(optimizer)), t_0_(t_0), t_mult_(t_mult), eta_min_(eta_min) {
  require_positive(t_0_, "CosineAnnealingWarmRestarts: t_0");
  require_positive(t_mult_, "CosineAnnealingWarmRestarts: t_mult");
}

double CosineAnnealingWarmRestarts::rate(double base_lr, int64_t step) const {
  if (t_mult_ == 1) {
    return cosine_between(base_lr, eta_min_,
                          static_cast<double>(step % t_0_) / static_cast<double>(t_0_));
  }
  int64_t cycle = t_0_;  // cycles grow geometrically: at most 63 of them
  while (step >= cycle) {
    step -= cycle;
    cycle *= t_mult_;
  }
  return cosine_between(base_lr, eta_min_, static_cast<double>(step) / static_cast<double>(cycle));
}

OneCycleLR::OneCycleLR(Optimizer optimizer, int64_t total_steps, double pct_start,
                       double div_factor, double final_div_factor)
    : LRScheduler(std::move(optimizer)),
      total_steps_(total_steps),
      pct_start_(pct_start),
      div_factor_(div_factor),
      final_div_factor_(final_div_factor) {
  require_positive(total_steps_, "OneCycleLR: total_steps");
  if (!(pct_start_ > 0 && pct_start_ < 1)) throw Error("OneCycleLR: pct_start must be in (0, 1)");
  if (!(pct_start_ * static_cast<double>(total_steps_) > 1)) {
    throw Error(fmt::format(
        "OneCycleLR: pct_start * total_steps is {} * {} = {}; it must exceed 1, so that the rate "
        "has a step to rise to its peak in",
        pct_start_, total_steps_, pct_start_ * static_cast<double>(total_steps_)));
  }
  if (!(div_factor_ > 0 && final_div_factor_ > 0)) {
    throw Error("OneCycleLR: div_factor and final_div_factor must be positive");
  }
}

double OneCycleLR::rate(double base_lr, int64_t step) const {
  const double initial = base_lr / div_factor_;
  const double final_rate = initial / final_div_factor_;
  const double peak_at = pct_start_ * static_cast<double>(total_steps_) - 1.0;
  const double end_at = static_cast<double>(total_steps_) - 1.0;
  const double s = static_cast<double>(step);
  if (s <= peak_at) return cosine_between(initial, base_lr, s / peak_at);
  if (s >= end_at) return final_rate;
  return cosine_between(base_lr, final_rate, (s - peak_at) / (end_at - peak_at));
}

PolynomialLR::PolynomialLR(Optimizer optimizer, int64_t total_steps, double power,
                           double end_factor)
    : LRScheduler(std::move(optimizer)),
      total_steps_(total_steps),
      power_(power),
      end_factor_(end_factor) {
  require_positive(total_steps_, "PolynomialLR: total_steps");
}

double PolynomialLR::rate(double base_lr, int64_t step) const {
  const double end = base_lr * end_factor_;
  const double left =
      1.0 - static_cast<double>(std::min(step, total_steps_)) / static_cast<double>(total_steps_);
  return end + (base_lr - end) * std::pow(left, power_);
}

LinearWarmup::LinearWarmup(std::shared_ptr<LRScheduler> after, int64_t warmup_steps,
                           double start_factor)
    : LRScheduler(after ? after->optimizer() : nullptr),
      after_(std::move(after)),
      warmup_steps_(warmup_steps),
      start_factor_(start_factor) {
  if (!after_) throw Error("LinearWarmup: the scheduler to follow is null");
  require_positive(warmup_steps_, "LinearWarmup: warmup_steps");
}

double LinearWarmup::rate(double base_lr, int64_t step) const {
  if (step >= warmup_steps_) return after_->rate(base_lr, step - warmup_steps_);
  const double progress = static_cast<double>(step) / static_cast<double>(warmup_steps_);
  return after_->rate(base_lr, 0) * (start_factor_ + (1.0 - start_factor_) * progress);
}

nlohmann::json LinearWarmup::state() const {
  nlohmann::json out = LRScheduler::state();
  out["after"] = after_->state();
  return out;
}

void LinearWarmup::load_state(const nlohmann::json& state) {
  if (state.contains("after")) after_->load_state(state["after"]);
  LRScheduler::load_state(state);
}

void LinearWarmup::on_validation(const MetricValues& metrics) {
  after_->observe_validation(metrics);
}

}  // namespace crucible::lr
