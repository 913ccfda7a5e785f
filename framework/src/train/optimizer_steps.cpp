#include "train/optimizer_steps.h"

#include <fmt/format.h>

#include <crucible/errors.h>

namespace crucible::train {

void OptimizerSteps::record(const torch::optim::Optimizer* optimizer) {
  this_batch_.insert(optimizer);
  this_epoch_.insert(optimizer);
  ++total_[optimizer];
}

int64_t OptimizerSteps::total(const torch::optim::Optimizer* optimizer) const {
  const auto it = total_.find(optimizer);
  return it == total_.end() ? 0 : it->second;
}

nlohmann::json OptimizerSteps::to_json(const std::vector<Optimizer>& optimizers) const {
  nlohmann::json steps = nlohmann::json::array();
  nlohmann::json stepped = nlohmann::json::array();
  for (size_t i = 0; i < optimizers.size(); ++i) {
    steps.push_back(total(optimizers[i].get()));
    if (stepped_this_epoch(optimizers[i].get())) stepped.push_back(i);
  }
  return {{"optimizer_steps", steps}, {"stepped_this_epoch", stepped}};
}

void OptimizerSteps::from_json(const nlohmann::json& counters,
                               const std::vector<Optimizer>& optimizers) {
  const auto steps = counters.value("optimizer_steps", nlohmann::json::array());
  const auto stepped = counters.value("stepped_this_epoch", nlohmann::json::array());
  if (steps.size() != optimizers.size()) {
    throw TrainingError(
        fmt::format("checkpoint counts steps of {} optimizer(s), the trial wraps {}", steps.size(),
                    optimizers.size()));
  }
  total_.clear();
  this_epoch_.clear();
  this_batch_.clear();
  for (size_t i = 0; i < steps.size(); ++i) total_[optimizers[i].get()] = steps[i].get<int64_t>();
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
