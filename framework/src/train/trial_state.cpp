#include "train/trial_state.h"

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

void step_schedulers(TrialState& state, StepMode mode) {
  for (auto& s : state.schedulers) {
    const auto* optimizer = s.scheduler->optimizer().get();
    if (s.mode == mode &&
        (mode == StepMode::kEveryBatch ? state.steps.stepped_this_batch(optimizer)
                                       : state.steps.stepped_this_epoch(optimizer))) {
      s.scheduler->step();
    }
  }
}

}  // namespace crucible::detail
