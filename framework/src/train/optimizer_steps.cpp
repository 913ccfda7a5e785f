#include "train/optimizer_steps.h"

#include <fmt/format.h>

#include <crucible/errors.h>

namespace crucible::train {

void OptimizerSteps::record(const torch::optim::Optimizer* optimizer, int64_t batch_idx) {
  this_batch_.insert(optimizer);
  this_epoch_.insert(optimizer);
  ++total_[optimizer];
  batches_in_step_[optimizer] = batch_idx + 1 - last_step_end_[optimizer];
  last_step_end_[optimizer] = batch_idx + 1;
  consecutive_skips_ = 0;
}

void OptimizerSteps::record_skip() { ++consecutive_skips_; }

int64_t OptimizerSteps::batches_in_step(const torch::optim::Optimizer* optimizer) const {
  const auto it = batches_in_step_.find(optimizer);
  return it == batches_in_step_.end() ? 0 : it->second;
}

int64_t OptimizerSteps::total(const torch::optim::Optimizer* optimizer) const {
  const auto it = total_.find(optimizer);
  return it == total_.end() ? 0 : it->second;
}

nlohmann::json OptimizerSteps::to_json(const std::vector<Optimizer>& optimizers) const {
  nlohmann::json steps = nlohmann::json::array();
  nlohmann::json stepped = nlohmann::json::array();
  nlohmann::json ends = nlohmann::json::array();
  for (size_t i = 0; i < optimizers.size(); ++i) {
    const auto* optimizer = optimizers[i].get();
    steps.push_back(total(optimizer));
    if (stepped_this_epoch(optimizer)) stepped.push_back(i);
    const auto end = last_step_end_.find(optimizer);
    ends.push_back(end == last_step_end_.end() ? 0 : end->second);
  }
  return {{"optimizer_steps", steps},
          {"stepped_this_epoch", stepped},
          {"last_step_end", ends},
          {"consecutive_skips", consecutive_skips_}};
}

void OptimizerSteps::from_json(const nlohmann::json& counters,
                               const std::vector<Optimizer>& optimizers, int64_t batches) {
  const auto steps = counters.value("optimizer_steps", nlohmann::json::array());
  const auto stepped = counters.value("stepped_this_epoch", nlohmann::json::array());
  const auto ends = counters.value("last_step_end", nlohmann::json::array());
  if (steps.size() != optimizers.size()) {
    throw TrainingError(
        fmt::format("checkpoint counts steps of {} optimizer(s), the trial wraps {}", steps.size(),
                    optimizers.size()));
  }
  total_.clear();
  this_epoch_.clear();
  begin_batch();
  last_step_end_.clear();
  consecutive_skips_ = counters.value("consecutive_skips", int64_t{0});
  for (size_t i = 0; i < steps.size(); ++i) {
    total_[optimizers[i].get()] = steps[i].get<int64_t>();
    last_step_end_[optimizers[i].get()] = i < ends.size() ? ends[i].get<int64_t>() : batches;
  }
  for (const auto& i : stepped) {
    const auto index = i.get<size_t>();
    if (index >= optimizers.size()) {
      throw TrainingError(fmt::format("checkpoint names optimizer {}, the trial wraps {}", index,
                                      optimizers.size()));
    }
    this_epoch_.insert(optimizers[index].get());
  }
}

}  // namespace crucible::train
