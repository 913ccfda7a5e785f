#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include <crucible/config.h>
#include <crucible/distributed.h>
#include <crucible/metrics.h>
#include <crucible/optim.h>
#include <crucible/trial_context.h>

#include "distributed/grad_sync.h"
#include "profile/profiler.h"
#include "train/grad_scaler.h"
#include "train/optimizer_steps.h"

namespace crucible::detail {

// The trainer's side of a TrialContext: what the trial wrapped, and where training stands.
struct TrialState {
  struct Scheduler {
    std::shared_ptr<LRScheduler> scheduler;
    StepMode mode;
  };

  const ExperimentConfig* config = nullptr;
  nlohmann::json hparams;
  torch::Device device = torch::kCPU;
  uint64_t trial_seed = 0;
  int64_t slots = 1;
  DistributedContext dist;
  // Gradient averaging per wrapped optimizer, built on first use in a distributed run (overlap is
  // set there).
  dist::GradientSyncOptions grad_sync_options;
  std::map<const torch::optim::Optimizer*, std::unique_ptr<dist::GradientSync>> grad_syncs;
  // Rank 0's buffers of the wrapped models, copied to every rank after each batch (distributed).
  std::unique_ptr<dist::TensorBroadcast> buffers;

  std::vector<std::shared_ptr<torch::nn::Module>> models;
  std::vector<Optimizer> optimizers;
  std::vector<Scheduler> schedulers;
  std::map<std::string, std::shared_ptr<MetricReducer>> reducers;  // by metric name

  // Inside train_batch the batch being trained; elsewhere the number of batches trained
  // (TrialContext::current_train_batch).
  int64_t batch_idx = 0;
  // True from a training batch's epoch-start callbacks to its epoch-end callbacks, train_batch
  // between them: batch_idx is then the batch being trained.
  bool training_batch = false;
  int64_t epoch_len = 1;
  train::OptimizerSteps steps;
  // Dynamic loss scaling under fp16 mixed precision; null otherwise.
  std::unique_ptr<train::GradScaler> scaler;
  // The trainer's own training metrics of the batch being trained (grad_norm) and its skipped
  // optimizer steps; the fit loop reports and clears them after each batch.
  Metrics step_metrics;
  int64_t skipped_steps = 0;
  // The fit's profiler (times backward, the gradient sync and step_optimizer); null outside a fit.
  profile::Profiler* profiler = nullptr;
  // Set once the trial's constructor has returned: wrapping is refused from then on, since a
  // checkpoint holds, and a resume restores, what the constructor wrapped.
  bool constructed = false;
  bool stop_requested = false;  // TrialContext::set_stop_requested, and its reason
  std::string stop_reason;
};

// Whether the batch being trained ends an accumulation window (the optimizers step on it).
bool is_update_batch(const TrialState& state);

// The gradient averaging of `optimizer`'s parameters, built on first use. It overlaps with
// backward when the trial wraps exactly one optimizer; with several, each optimizer's gradients
// are averaged when it steps.
dist::GradientSync& gradient_sync(TrialState& state, const Optimizer& optimizer);

// TrialContext::step_optimizer: see its contract.
void step_optimizer(TrialState& state, const Optimizer& optimizer,
                    const GradientClipping& clipping);

// Steps, after the batch being trained, the kEveryBatch and kEveryOptimizerStep schedulers whose
// optimizer stepped on it (a kEveryBatch one by the batches that step closed).
void step_schedulers_after_batch(TrialState& state);
// Steps, after the last batch of an epoch, the kEveryEpoch schedulers whose optimizer stepped in
// that epoch.
void step_schedulers_after_epoch(TrialState& state);

// Makes the trial's counters read `batches` trained over `epochs` epochs of the schedule, as
// outside train_batch (trainer validate and predict, from a checkpoint's metadata).
void set_trained_position(TrialState& state, int64_t batches, double epochs);

// The trainer's way to make the TrialContext of `state`, which must outlive it.
struct TrialContextAccess {
  static std::unique_ptr<TrialContext> make(TrialState* state) {
    return std::unique_ptr<TrialContext>(new TrialContext(state));
  }
  static const TrialState& state(const TrialContext& ctx) { return *ctx.state_; }
};

}  // namespace crucible::detail
