#include "train/torch_lr_scheduler.h"

#include <type_traits>

#include <fmt/format.h>

#include <crucible/errors.h>

namespace crucible::train {
namespace {

// LibTorch's LRScheduler keeps its step count and its reading of the rates protected; a derived
// class may name them, and so reach them in any scheduler. Never constructed.
struct Access : torch::optim::LRScheduler {
  static auto& step_count(torch::optim::LRScheduler& s) { return s.*(&Access::step_count_); }
  static std::vector<double> current_lrs(const torch::optim::LRScheduler& s) {
    return (s.*(&Access::get_current_lrs))();
  }
};

}  // namespace

TorchLRScheduler::TorchLRScheduler(Optimizer optimizer,
                                   std::shared_ptr<torch::optim::LRScheduler> scheduler)
    : LRScheduler(std::move(optimizer)), scheduler_(std::move(scheduler)) {
  TORCH_INTERNAL_ASSERT(scheduler_);
  LRScheduler::set_step_count(static_cast<int64_t>(Access::step_count(*scheduler_)));
}

nlohmann::json TorchLRScheduler::state() const {
  return {{"step_count", static_cast<int64_t>(Access::step_count(*scheduler_))},
          {"rates", get_last_lr()}};
}

void TorchLRScheduler::load_state(const nlohmann::json& state) {
  if (!state.is_object() || !state.contains("rates") || !state["rates"].is_array()) {
    throw Error(fmt::format("LibTorch LR scheduler state {} lacks its rates", state.dump()));
  }
  loading_ = true;
  try {
    LRScheduler::load_state(state);
  } catch (...) {
    loading_ = false;
    throw;
  }
  loading_ = false;
  auto& groups = optimizer()->param_groups();
  const nlohmann::json& rates = state["rates"];
  if (rates.size() != groups.size()) {
    throw Error(fmt::format("LibTorch LR scheduler state has {} rates for {} param groups",
                            rates.size(), groups.size()));
  }
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options().set_lr(rates[i].get<double>());
}

void TorchLRScheduler::apply() {
  auto& done = Access::step_count(*scheduler_);
  using Count = std::remove_reference_t<decltype(done)>;
  if (loading_) {
    done = static_cast<Count>(step_count());
    return;
  }
  while (static_cast<int64_t>(done) < step_count()) scheduler_->step();
}

Optimizer optimizer_of(const torch::optim::LRScheduler& scheduler,
                       const std::vector<Optimizer>& optimizers) {
  // The scheduler holds its optimizer by a private reference: mark each candidate's first rate
  // in turn and see whether the scheduler reads the mark.
  constexpr double kMark = -1234.5678;
  for (const Optimizer& optimizer : optimizers) {
    auto& groups = optimizer->param_groups();
    if (groups.empty()) continue;
    auto& options = groups.front().options();
    const double rate = options.get_lr();
    options.set_lr(kMark);
    const std::vector<double> seen = Access::current_lrs(scheduler);
    options.set_lr(rate);
    if (!seen.empty() && seen.front() == kMark) return optimizer;
  }
  return nullptr;
}

}  // namespace crucible::train
