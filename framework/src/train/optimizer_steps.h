#pragma once

// Which wrapped optimizers stepped, and when.

#include <cstdint>
#include <map>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include <crucible/optim.h>

namespace crucible::train {

// The one record of the optimizer steps of a trial: on the batch being trained, in the epoch so
// far, and since the trial began (across resumes). TrialContext::step_optimizer records each
// step, the fit loop steps the schedulers from it, checkpoints carry it.
class OptimizerSteps {
 public:
  // Starts a batch: no optimizer has stepped on it yet.
  void begin_batch() {
    this_batch_.clear();
    batches_in_step_.clear();
  }
  // Ends an epoch: no optimizer has stepped in the next one yet.
  void end_epoch() { this_epoch_.clear(); }
  // Records a step of `optimizer` on batch `batch_idx`, the batch being trained.
  void record(const torch::optim::Optimizer* optimizer, int64_t batch_idx);
  // Records that an optimizer's step was skipped (non-finite gradients). Its batches count
  // toward the next step taken (batches_in_step), so that a schedule in batches keeps its length.
  void record_skip();
  // Skipped steps since the last step that was taken (over all optimizers).
  int64_t consecutive_skips() const { return consecutive_skips_; }

  bool stepped_this_batch(const torch::optim::Optimizer* optimizer) const {
    return this_batch_.count(optimizer) > 0;
  }
  bool stepped_this_epoch(const torch::optim::Optimizer* optimizer) const {
    return this_epoch_.count(optimizer) > 0;
  }
  // Steps `optimizer` took since the trial began.
  int64_t total(const torch::optim::Optimizer* optimizer) const;
  // The batches the step of `optimizer` on this batch closes: those trained since its previous
  // step, skipped steps' batches included (1 without accumulation or skips). 0 when it did not
  // step on this batch.
  int64_t batches_in_step(const torch::optim::Optimizer* optimizer) const;

  // The record by index in `optimizers` (the trial's wrapped optimizers, in wrap order):
  // {"optimizer_steps": [n, ...], "stepped_this_epoch": [i, ...], "last_step_end": [b, ...],
  // "consecutive_skips": n} (last_step_end: batches trained when each optimizer last stepped).
  nlohmann::json to_json(const std::vector<Optimizer>& optimizers) const;
  // Restores what to_json returned, after `batches` batches (which stands for last_step_end when
  // the record lacks it). Throws TrainingError when it counts the steps of another number of
  // optimizers or names one that `optimizers` does not hold.
  void from_json(const nlohmann::json& counters, const std::vector<Optimizer>& optimizers,
                 int64_t batches);

 private:
  std::set<const torch::optim::Optimizer*> this_batch_;
  std::set<const torch::optim::Optimizer*> this_epoch_;
  std::map<const torch::optim::Optimizer*, int64_t> total_;
  std::map<const torch::optim::Optimizer*, int64_t> last_step_end_;
  std::map<const torch::optim::Optimizer*, int64_t> batches_in_step_;  // this batch's steps
  int64_t consecutive_skips_ = 0;
};

}  // namespace crucible::train
