#include "train/trial_state.h"

#include <fmt/format.h>

#include <crucible/errors.h>

namespace crucible::detail {

bool is_update_batch(const TrialState& state) {
  return (state.batch_idx + 1) % state.config->optimizations.aggregation_frequency == 0;
}

dist::GradientSync& gradient_sync(TrialState& state, const Optimizer& optimizer) {
  auto& sync = state.grad_syncs[optimizer.get()];
  if (!sync) {
    std::vector<torch::Tensor> params;
    for (const auto& group : optimizer->param_groups()) {
      params.insert(params.end(), group.params().begin(), group.params().end());
    }
    sync = std::make_unique<dist::GradientSync>(
        state.dist, std::move(params),
        dist::GradientSyncOptions(state.grad_sync_options).overlap(state.optimizers.size() == 1));
  }
  return *sync;
}

nlohmann::json optimizer_counters(const TrialState& state) {
  nlohmann::json steps = nlohmann::json::array();
  nlohmann::json stepped = nlohmann::json::array();
  for (size_t i = 0; i < state.optimizers.size(); ++i) {
    const auto* opt = state.optimizers[i].get();
    auto it = state.optimizer_steps.find(opt);
    steps.push_back(it == state.optimizer_steps.end() ? int64_t{0} : it->second);
    if (state.stepped_this_epoch.count(opt)) stepped.push_back(i);
  }
  return {{"optimizer_steps", steps}, {"stepped_this_epoch", stepped}};
}

void restore_optimizer_counters(TrialState& state, const nlohmann::json& counters) {
  const auto steps = counters.value("optimizer_steps", nlohmann::json::array());
  const auto stepped = counters.value("stepped_this_epoch", nlohmann::json::array());
  if (steps.size() != state.optimizers.size()) {
    throw TrainingError(
        fmt::format("checkpoint counts steps of {} optimizer(s), the trial wraps {}", steps.size(),
                    state.optimizers.size()));
  }
  state.optimizer_steps.clear();
  state.stepped_this_epoch.clear();
  for (size_t i = 0; i < steps.size(); ++i) {
    state.optimizer_steps[state.optimizers[i].get()] = steps[i].get<int64_t>();
  }
  for (const auto& i : stepped) {
    const auto index = i.get<size_t>();
    if (index >= state.optimizers.size()) {
      throw TrainingError(fmt::format("checkpoint names optimizer {}, the trial wraps {}", index,
                                      state.optimizers.size()));
    }
    state.stepped_this_epoch.insert(state.optimizers[index].get());
  }
}

}  // namespace crucible::detail
