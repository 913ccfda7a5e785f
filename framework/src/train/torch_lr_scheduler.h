#pragma once

// A LibTorch scheduler (torch::optim::LRScheduler) driven and checkpointed as Crucible's own.

#include <memory>

#include <crucible/optim.h>

namespace crucible::train {

// Steps `scheduler`, built on `optimizer`, as a crucible::LRScheduler: each advance of the step
// count runs one scheduler->step(), which writes the rates. state() is the LibTorch scheduler's
// own step count (steps the trial made by hand included) and the optimizer's rates; load_state
// sets that count without stepping and writes those rates, which is all a LibTorch scheduler
// computes the next rates from (LRScheduler::get_lrs reads the count and the current rates).
class TorchLRScheduler : public LRScheduler {
 public:
  TorchLRScheduler(Optimizer optimizer, std::shared_ptr<torch::optim::LRScheduler> scheduler);
  nlohmann::json state() const override;
  void load_state(const nlohmann::json& state) override;

 protected:
  void apply() override;

 private:
  std::shared_ptr<torch::optim::LRScheduler> scheduler_;
  bool loading_ = false;
};

// The one of `optimizers` whose param groups `scheduler` reads; nullptr when none is.
Optimizer optimizer_of(const torch::optim::LRScheduler& scheduler,
                       const std::vector<Optimizer>& optimizers);

}  // namespace crucible::train
