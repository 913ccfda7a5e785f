#include <cmath>

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

void LRScheduler::apply() {
  const double f = factor(step_count_);
  auto& groups = optimizer_->param_groups();
  for (size_t i = 0; i < groups.size() && i < base_lrs_.size(); ++i) {
    groups[i].options().set_lr(base_lrs_[i] * f);
  }
}

std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> out;
  for (auto& group : optimizer_->param_groups()) out.push_back(group.options().get_lr());
  return out;
}

namespace lr {

StepLR::StepLR(Optimizer optimizer, int64_t step_size, double gamma)
    : LRScheduler(std::move(optimizer)), step_size_(step_size), gamma_(gamma) {
  if (step_size_ <= 0) throw Error("StepLR: step_size must be positive");
}

double StepLR::factor(int64_t step) const {
  return std::pow(gamma_, static_cast<double>(step / step_size_));
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
