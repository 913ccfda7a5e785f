#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <torch/torch.h>

#include <crucible/metrics.h>

namespace crucible {

// Code that runs at fixed points of the fit loop beside the trial (logging, early-stopping
// signals, weight averaging, ...). A trial returns its callbacks from Trial::build_callbacks().
// Every hook defaults to nothing. Hooks run on the trainer's thread of every rank, callbacks in the
// order of their names. An exception from a hook fails training as one from train_batch does,
// naming the callback and the hook.
class Callback {
 public:
  virtual ~Callback() = default;

  // Before the first batch this fit trains (after a resume: once everything is restored).
  virtual void on_training_start() {}
  // Before the first batch of epoch `epoch_idx`. A run resumed in the middle of an epoch does
  // not call it again for that epoch.
  virtual void on_training_epoch_start(int64_t /*epoch_idx*/) {}
  // Before train_batch of batch `batch_idx` (after on_training_epoch_start when the batch starts
  // an epoch).
  virtual void on_training_batch_start(int64_t /*batch_idx*/) {}
  // After batch `batch_idx` was trained: train_batch returned `metrics` (with Crucible's own,
  // such as grad_norm; tensors as the trial made them, reading one on a GPU is a host sync), the
  // optimizers it stepped have stepped (TrialContext::optimizer_stepped says which) and the
  // per-batch schedulers advanced; before on_training_epoch_end when the batch ends an epoch.
  virtual void on_training_batch_end(int64_t /*batch_idx*/, const Metrics& /*metrics*/) {}
  // After the last batch of epoch `epoch_idx` (and after its epoch scheduler steps).
  virtual void on_training_epoch_end(int64_t /*epoch_idx*/) {}
  // Before a validation, and after it with the reduced metrics (named "validation_<name>").
  virtual void on_validation_start() {}
  virtual void on_validation_end(const MetricValues& /*metrics*/) {}
  // After checkpoint directory `dir` was written, published and retention applied.
  virtual void on_checkpoint_end(const std::string& /*dir*/) {}
  // After training ended, finished or stopped by a signal with its checkpoint; not after a failure.
  virtual void on_training_end() {}

  // The callback's state, saved in every checkpoint and restored on resume (not by warm start).
  virtual void save_state(torch::serialize::OutputArchive& /*archive*/) {}
  virtual void load_state(torch::serialize::InputArchive& /*archive*/) {}
};

// A trial's callbacks by name. Names (letters, digits and '_') key their state in checkpoints.
using Callbacks = std::map<std::string, std::shared_ptr<Callback>>;

}  // namespace crucible
