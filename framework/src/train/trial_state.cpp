#include "train/trial_state.h"

#include <algorithm>
#include <cmath>

#include "train/autocast.h"
#include "train/grad_clip.h"
#include "train/gradient_values.h"

namespace crucible::detail {
namespace {

// Clears every gradient of `optimizer` after its step. In one process: undefined, as 2.x's
// zero_grad() leaves them, so that the next backward stores its gradients instead of adding them
// to zeros (two fewer operations per parameter and step). In a distributed run the gradient sync
// zeroes them in place, so that gradients that are bucket views stay so, and counts the zeros as
// no gradient: a parameter no rank gives one in the next window is left with none, as here. A
// parameter that no longer requires gradients is set to none either way.
void clear_gradients(TrialState& state, const Optimizer& optimizer) {
  const bool distributed = state.dist.size() > 1;
  if (distributed) gradient_sync(state, optimizer).clear_gradients();
  for (auto& group : optimizer->param_groups()) {
    for (auto& p : group.params()) {
      // The sync clears those that require gradients (it was built again if that changed).
      if (p.grad().defined() && !(distributed && p.requires_grad())) {
        p.mutable_grad() = torch::Tensor();
      }
    }
  }
}

std::vector<torch::Tensor> parameters_of(const torch::optim::Optimizer& optimizer) {
  std::vector<torch::Tensor> params;
  for (const auto& group : optimizer.param_groups()) {
    params.insert(params.end(), group.params().begin(), group.params().end());
  }
  return params;
}

// Whether every defined gradient of `params` is finite (one host sync).
bool gradients_finite(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> finite;
  for (const auto& g : train::gradient_values(params)) finite.push_back(torch::isfinite(g).all());
  return finite.empty() || torch::stack(finite).all().item<bool>();
}

// "grad_norm" for the first wrapped optimizer, "grad_norm_<i>" for the i-th.
std::string grad_norm_name(const TrialState& state, const Optimizer& optimizer) {
  for (size_t i = 1; i < state.optimizers.size(); ++i) {
    if (state.optimizers[i] == optimizer) return "grad_norm_" + std::to_string(i);
  }
  return "grad_norm";
}

}  // namespace

bool is_update_batch(const TrialState& state) {
  return (state.batch_idx + 1) % state.config->optimizations.aggregation_frequency == 0;
}

dist::GradientSync& gradient_sync(TrialState& state, const Optimizer& optimizer) {
  auto& sync = state.grad_syncs[optimizer.get()];
  if (sync && !sync->matches(*optimizer)) {
    // A layer was frozen or unfrozen, or the optimizer's parameters changed: built again over
    // the parameters that now require gradients, after averaging what the ranks hold (a layer
    // frozen after backward gave it a gradient is stepped with the mean, as one process steps it
    // with its gradient; the new sync averages the rest again, which leaves a mean as it is up to
    // rounding, exactly for a power-of-two number of ranks, and the same on every rank). Every
    // rank makes the same change at the same batch, so every rank takes part.
    sync->finish();
    sync.reset();
  }
  if (!sync) {
    sync = std::make_unique<dist::GradientSync>(
        state.dist, parameters_of(*optimizer),
        dist::GradientSyncOptions(state.grad_sync_options).overlap(state.optimizers.size() == 1),
        train::sparse_gradient_parameters(state.models));
  }
  return *sync;
}

void step_optimizer(TrialState& state, const Optimizer& optimizer,
                    const GradientClipping& clipping) {
  if (std::find(state.optimizers.begin(), state.optimizers.end(), optimizer) ==
      state.optimizers.end()) {
    throw Error(
        "step_optimizer: the optimizer was not wrapped with wrap_optimizer, so no checkpoint "
        "would hold its state; wrap it in the trial's constructor and step what wrap_optimizer "
        "returns");
  }
  if (!is_update_batch(state)) return;
  const profile::ScopedPhase timing(state.profiler, profile::Phase::kStepOptimizer);
  if (state.dist.size() > 1) {
    dist::GradientSync& sync = gradient_sync(state, optimizer);
    if (sync.changed_since_finish()) {
      const profile::ScopedPhase waiting(state.profiler, profile::Phase::kGradientSync);
      sync.finish();
    }
  }
  const bool check = state.config->optimizations.non_finite == NonFinitePolicy::kSkip;
  std::vector<torch::Tensor> params;
  if (state.scaler || check || clipping.enabled()) {
    params = parameters_of(*optimizer);
    train::coalesce_sparse_gradients(params);
  }
  bool skip = false;
  if (state.scaler) {
    skip = state.scaler->unscale(params);
  } else if (check) {
    skip = !gradients_finite(params);
  }
  // A skipped step's gradients are cleared unclipped, and its norm (inf or NaN) is no
  // divergence: under fp16 the scaler's overflows are routine, so grad_norm counts steps taken.
  if (clipping.enabled() && !skip) {
    state.step_metrics[grad_norm_name(state, optimizer)] = train::clip_gradients(params, clipping);
  }
  if (skip) {
    state.steps.record_skip();
    ++state.skipped_steps;
  } else {
    optimizer->step();
    state.steps.record(optimizer.get(), state.batch_idx);
    if (state.config->optimizations.mixed_precision != MixedPrecision::kNone) {
      train::clear_autocast_cache();
    }
  }
  clear_gradients(state, optimizer);
}

void step_schedulers_after_batch(TrialState& state) {
  for (auto& s : state.schedulers) {
    const auto* optimizer = s.scheduler->optimizer().get();
    if (!state.steps.stepped_this_batch(optimizer)) continue;
    if (s.mode == StepMode::kEveryOptimizerStep) {
      s.scheduler->step();
    } else if (s.mode == StepMode::kEveryBatch) {
      s.scheduler->set_step_count(s.scheduler->step_count() +
                                  state.steps.batches_in_step(optimizer));
    }
  }
}

void step_schedulers_after_epoch(TrialState& state) {
  for (auto& s : state.schedulers) {
    if (s.mode == StepMode::kEveryEpoch &&
        state.steps.stepped_this_epoch(s.scheduler->optimizer().get())) {
      s.scheduler->step();
    }
  }
}

void set_trained_position(TrialState& state, int64_t batches, double epochs) {
  state.batch_idx = batches;
  // The schedule's epoch length, which the checkpoint gives as batches over epochs; before the
  // first whole epoch any length above `batches` reads epoch 0.
  state.epoch_len =
      epochs >= 1 ? std::max<int64_t>(1, std::llround(batches / epochs)) : batches + 1;
}

}  // namespace crucible::detail
