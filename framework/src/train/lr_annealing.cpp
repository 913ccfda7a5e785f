#include <cmath>
#include <optional>
#include <tuple>
#include <type_traits>

#include <fmt/format.h>

#include <crucible/errors.h>
#include <crucible/optim.h>
#include <crucible/optimizers.h>

namespace crucible::lr {
namespace {

constexpr double kPi = 3.14159265358979323846;

// From `high` at t = 0 down to `low` at t = 1 along half a cosine.
double cosine_between(double high, double low, double t) {
  return low + (high - low) * (1.0 + std::cos(kPi * t)) / 2.0;
}

void require_positive(int64_t value, const char* what) {
  if (value <= 0) throw Error(fmt::format("{} must be positive, got {}", what, value));
}

// Whether a param group's options are Options; if so, and `momentum` is given, sets what PyTorch's
// OneCycleLR cycles in them: their `momentum`, or else the first of their `betas`.
template <class Options>
bool set_if(torch::optim::OptimizerOptions& options, const std::optional<double>& momentum) {
  auto* typed = dynamic_cast<Options*>(&options);
  if (typed == nullptr) return false;
  if (!momentum) return true;
  if constexpr (std::is_same_v<Options, torch::optim::SGDOptions> ||
                std::is_same_v<Options, torch::optim::RMSpropOptions>) {
    typed->momentum(*momentum);
  } else {
    typed->betas(std::make_tuple(*momentum, std::get<1>(typed->betas())));
  }
  return true;
}

// Whether a param group's options have a momentum that OneCycleLR cycles (SGD, RMSprop, Adam,
// AdamW, SparseAdam); if so, and `momentum` is given, sets it.
bool cycled_momentum(torch::optim::OptimizerOptions& options,
                     const std::optional<double>& momentum) {
  return set_if<torch::optim::SGDOptions>(options, momentum) ||
         set_if<torch::optim::RMSpropOptions>(options, momentum) ||
         set_if<torch::optim::AdamOptions>(options, momentum) ||
         set_if<torch::optim::AdamWOptions>(options, momentum) ||
         set_if<optim::SparseAdamOptions>(options, momentum);
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

OneCycleLR::OneCycleLR(Optimizer optimizer, int64_t total_steps, OneCycleOptions options)
    : LRScheduler(std::move(optimizer)), total_steps_(total_steps), options_(options) {
  require_positive(total_steps_, "OneCycleLR: total_steps");
  const double pct_start = options_.pct_start();
  if (!(pct_start > 0 && pct_start < 1)) {
    throw Error(fmt::format("OneCycleLR: pct_start must be in (0, 1), got {}", pct_start));
  }
  if (!(pct_start * static_cast<double>(total_steps_) > 1)) {
    throw Error(fmt::format(
        "OneCycleLR: pct_start * total_steps is {} * {} = {}; it must exceed 1, so that the rate "
        "has a step to rise to its peak in",
        pct_start, total_steps_, pct_start * static_cast<double>(total_steps_)));
  }
  if (!(options_.div_factor() > 0 && options_.final_div_factor() > 0)) {
    throw Error(
        fmt::format("OneCycleLR: div_factor and final_div_factor must be positive, got {} and {}",
                    options_.div_factor(), options_.final_div_factor()));
  }
  if (!options_.cycle_momentum()) return;
  auto& groups = this->optimizer()->param_groups();
  for (size_t i = 0; i < groups.size(); ++i) {
    if (!cycled_momentum(groups[i].options(), std::nullopt)) {
      throw Error(fmt::format(
          "OneCycleLR: param group {} has no momentum to cycle (cycle_momentum needs SGD, "
          "RMSprop, Adam, AdamW or SparseAdam); pass OneCycleOptions().cycle_momentum(false)",
          i));
    }
  }
}

OneCycleLR::OneCycleLR(Optimizer optimizer, int64_t total_steps, double pct_start,
                       double div_factor, double final_div_factor)
    : OneCycleLR(std::move(optimizer), total_steps,
                 OneCycleOptions()
                     .pct_start(pct_start)
                     .div_factor(div_factor)
                     .final_div_factor(final_div_factor)
                     .cycle_momentum(false)) {}

std::pair<bool, double> OneCycleLR::phase(int64_t step) const {
  const double peak_at = options_.pct_start() * static_cast<double>(total_steps_) - 1.0;
  const double end_at = static_cast<double>(total_steps_) - 1.0;
  const double s = static_cast<double>(step);
  if (s <= peak_at) return {true, s / peak_at};
  if (s >= end_at) return {false, 1.0};
  return {false, (s - peak_at) / (end_at - peak_at)};
}

double OneCycleLR::rate(double base_lr, int64_t step) const {
  const double initial = base_lr / options_.div_factor();
  const auto [rising, t] = phase(step);
  return rising ? cosine_between(initial, base_lr, t)
                : cosine_between(base_lr, initial / options_.final_div_factor(), t);
}

double OneCycleLR::momentum(int64_t step) const {
  const auto [rising, t] = phase(step);
  return rising ? cosine_between(options_.max_momentum(), options_.base_momentum(), t)
                : cosine_between(options_.base_momentum(), options_.max_momentum(), t);
}

void OneCycleLR::apply() {
  LRScheduler::apply();
  if (!options_.cycle_momentum()) return;
  const double m = momentum(step_count());
  for (auto& group : optimizer()->param_groups()) cycled_momentum(group.options(), m);
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
  if (const auto* cycle = dynamic_cast<const OneCycleLR*>(after_.get());
      cycle != nullptr && cycle->cycles_momentum()) {
    throw Error(
        "LinearWarmup: a OneCycleLR that cycles momentum cannot follow it (only its rates would "
        "be used); OneCycleLR warms up itself for pct_start of its steps");
  }
}

double LinearWarmup::rate(double base_lr, int64_t step) const {
  return group_rate(0, base_lr, step);
}

double LinearWarmup::group_rate(size_t group, double base_lr, int64_t step) const {
  if (step >= warmup_steps_) return after_->group_rate(group, base_lr, step - warmup_steps_);
  const double progress = static_cast<double>(step) / static_cast<double>(warmup_steps_);
  return after_->group_rate(group, base_lr, 0) * (start_factor_ + (1.0 - start_factor_) * progress);
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
