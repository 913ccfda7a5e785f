#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <torch/torch.h>

namespace crucible {

// An optimizer wrapped by TrialContext::wrap_optimizer.
using Optimizer = std::shared_ptr<torch::optim::Optimizer>;

// When Crucible steps a wrapped LR scheduler. A scheduler never steps on a batch where its
// optimizer did not step.
enum class StepMode {
  kEveryBatch,  // after every batch on which its optimizer stepped
  kEveryEpoch,  // after the last batch of every epoch
  kManual,      // only when the trial calls step()
};

// A learning-rate schedule whose whole state is its step count: the learning rate of each param
// group is base_lr * factor(step_count), base_lr being the group's rate at construction.
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer optimizer);
  virtual ~LRScheduler() = default;

  // Advances by one step and writes the new rates into the optimizer.
  void step();
  int64_t step_count() const { return step_count_; }
  // Restores a step count (from a checkpoint) and writes the matching rates.
  void set_step_count(int64_t count);
  // The rate of each param group after the latest step.
  std::vector<double> get_last_lr() const;
  const Optimizer& optimizer() const { return optimizer_; }

 protected:
  // Multiplier of the base rates after `step` steps; factor(0) is normally 1.
  virtual double factor(int64_t step) const = 0;

 private:
  void apply();
  Optimizer optimizer_;
  std::vector<double> base_lrs_;
  int64_t step_count_ = 0;
};

namespace lr {

// Multiplies the rate by gamma every step_size steps.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double factor(int64_t step) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// Multiplies the rate by gamma every step.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer optimizer, double gamma);

 protected:
  double factor(int64_t step) const override;

 private:
  double gamma_;
};

// rate = base_rate * fn(step). fn must be a pure function of the step count.
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer optimizer, std::function<double(int64_t)> fn);

 protected:
  double factor(int64_t step) const override;

 private:
  std::function<double(int64_t)> fn_;
};

}  // namespace lr
}  // namespace crucible
