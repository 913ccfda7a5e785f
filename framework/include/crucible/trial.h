#pragma once

#include <cstdint>

#include <torch/torch.h>

#include <crucible/batch.h>
#include <crucible/callback.h>
#include <crucible/data.h>
#include <crucible/metrics.h>

namespace crucible {

// A user's training code. Crucible constructs it with a TrialContext& (the constructor wraps
// models, optimizers and schedulers there), then drives the fit loop. A trial overrides exactly
// one of evaluate_batch and evaluate_full_dataset; neither or both is an error at start-up.
class Trial {
 public:
  virtual ~Trial() = default;

  // The training data. Crucible sets the loader's shuffle seed from the trial seed when the
  // trial set none, and positions it (O(1)) when resuming.
  virtual DataLoader build_training_data_loader() = 0;
  // The validation data. Called once per run of the trial, at its first validation; the loader is
  // then kept and iterated from its start at every validation, so data that changes between
  // validations changes through the loader's dataset. (`trainer predict` calls it again through
  // build_predict_data_loader.)
  virtual DataLoader build_validation_data_loader() = 0;

  // Trains on one batch (already on ctx.device()). batch_idx counts the batches this trial
  // trained before this one; epoch_idx = batch_idx / epoch length. Returns metrics to average
  // over the reporting period.
  virtual Metrics train_batch(Batch& batch, int64_t epoch_idx, int64_t batch_idx) = 0;

  // Evaluates one validation batch; Crucible reduces the results with evaluation_reducer().
  // During validation (this, evaluate_full_dataset and the reducers) and predict_batch, every
  // wrapped model is in evaluation mode with all its submodules and no gradient is recorded;
  // afterwards, whether or not validation threw, each module has the training flag it had before,
  // so a submodule or a model the trial keeps in evaluation mode (a frozen batch norm, a teacher)
  // stays there.
  virtual Metrics evaluate_batch(Batch& batch, int64_t batch_idx);
  // Evaluates the whole validation set at once; returns the final metrics.
  virtual Metrics evaluate_full_dataset(DataLoader& loader);

  // How evaluate_batch metrics are reduced. Default: AVG for all.
  virtual EvaluationReducer evaluation_reducer() { return ReduceOp::kAvg; }
  // Records in a batch (at least 1; validation fails naming the batch otherwise), which weigh a
  // validation batch's metrics in their kAvg average. Default: dimension 0 of the first tensor
  // leaf.
  virtual int64_t get_batch_length(const Batch& batch);

  // The data `trainer predict` runs over. Default: build_validation_data_loader().
  virtual DataLoader build_predict_data_loader() { return build_validation_data_loader(); }
  // The model's outputs for one batch, for `trainer predict`; rows are concatenated along
  // dimension 0 over all batches. Runs under autocast with mixed precision, as evaluate_batch
  // does: a bf16 run's outputs are bfloat16 unless it casts them. Not implemented by default.
  virtual torch::Tensor predict_batch(Batch& batch, int64_t batch_idx);

  // The trial's callbacks, built once after the constructor. Default: none.
  virtual Callbacks build_callbacks() { return {}; }

  // Saves and restores state of the trial's own beyond its wrapped models, optimizers and
  // schedulers, in an archive of the trial's alone (any keys). Both default to nothing.
  virtual void save_state(torch::serialize::OutputArchive& archive);
  virtual void load_state(torch::serialize::InputArchive& archive);
};

}  // namespace crucible
