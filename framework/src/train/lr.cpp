#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <crucible/errors.h>
#include <crucible/optim.h>

namespace crucible {

LRScheduler::LRScheduler(Optimizer optimizer) : optimizer_(std::move(optimizer)) {
  if (!optimizer_) throw Error("LRScheduler: the optimizer is null");
  for (auto& group : optimizer_->param_groups()) base_lrs_.push_back(group.options().get_lr());
}

void LRScheduler::step() {
  ++step_count_;
  apply();
}

void LRScheduler::set_step_count(int64_t count) {
  step_count_ = count;
  apply();
}

void LRScheduler::observe_validation(const MetricValues& metrics) {
  on_validation(metrics);
  apply();
}

void LRScheduler::apply() {
  auto& groups = optimizer_->param_groups();
  for (size_t i = 0; i < groups.size() && i < base_lrs_.size(); ++i) {
    groups[i].options().set_lr(group_rate(i, base_lrs_[i], step_count_));
  }
}

std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> out;
  for (auto& group : optimizer_->param_groups()) out.push_back(group.options().get_lr());
  return out;
}

nlohmann::json LRScheduler::state() const { return {{"step_count", step_count_}}; }

void LRScheduler::load_state(const nlohmann::json& state) {
  if (!state.is_object() || !state.contains("step_count")) {
    throw Error(fmt::format("LR scheduler state {} lacks step_count", state.dump()));
  }
  set_step_count(state["step_count"].get<int64_t>());
}

namespace lr {

StepLR::StepLR(Optimizer optimizer, int64_t step_size, double gamma)
    : LRScheduler(std::move(optimizer)), step_size_(step_size), gamma_(gamma) {
  if (step_size_ <= 0)
    throw Error(fmt::format("StepLR: step_size must be positive, got {}", step_size_));
}

double StepLR::factor(int64_t step) const {
  return std::pow(gamma_, static_cast<double>(step / step_size_));
}

MultiStepLR::MultiStepLR(Optimizer optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(std::move(optimizer)), milestones_(std::move(milestones)), gamma_(gamma) {
  for (size_t i = 0; i < milestones_.size(); ++i) {
    if (milestones_[i] <= 0 || (i > 0 && milestones_[i] <= milestones_[i - 1])) {
      throw Error(fmt::format("MultiStepLR: milestones must be positive and increasing, got [{}]",
                              fmt::join(milestones_, ", ")));
    }
  }
}

double MultiStepLR::factor(int64_t step) const {
  const auto passed =
      std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin();
  return std::pow(gamma_, static_cast<double>(passed));
}

ExponentialLR::ExponentialLR(Optimizer optimizer, double gamma)
    : LRScheduler(std::move(optimizer)), gamma_(gamma) {}

double ExponentialLR::factor(int64_t step) const {
  return std::pow(gamma_, static_cast<double>(step));
}

LambdaLR::LambdaLR(Optimizer optimizer, std::function<double(int64_t)> fn)
    : LRScheduler(std::move(optimizer)), fn_(std::move(fn)) {
  if (!fn_) throw Error("LambdaLR: the function is empty");
}

double LambdaLR::factor(int64_t step) const { return fn_(step); }

}  // namespace lr
}  // namespace crucible
