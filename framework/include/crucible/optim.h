#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <crucible/metrics.h>

namespace crucible {

// An optimizer wrapped by TrialContext::wrap_optimizer.
using Optimizer = std::shared_ptr<torch::optim::Optimizer>;

// When Crucible steps a wrapped LR scheduler. A scheduler never advances on a batch where its
// optimizer did not step (a step the gradient scaler or the non-finite policy skipped included).
// Under gradient accumulation (aggregation_frequency k) an optimizer steps once every k batches.
enum class StepMode {
  // The schedule counts batches: when its optimizer steps, the scheduler advances by the batches
  // trained since that optimizer's previous step (k under accumulation, 1 without).
  kEveryBatch,
  // The schedule counts optimizer steps: one step per step of its optimizer.
  kEveryOptimizerStep,
  // One step after the last batch of every epoch in which its optimizer stepped.
  kEveryEpoch,
  // Only when the trial calls step().
  kManual,
};

// A learning-rate schedule. The rate of each param group is rate(base_lr, step_count), base_lr
// being the group's rate when the scheduler was constructed. A subclass overrides factor() (rate
// = base_lr * factor) or rate(); both must be pure functions of their arguments and of what
// state() saves, so that a checkpointed run resumes with the same rates.
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer optimizer);
  virtual ~LRScheduler() = default;

  // Advances by one step and writes the new rates into the optimizer.
  void step();
  int64_t step_count() const { return step_count_; }
  // Sets the step count and writes the matching rates.
  void set_step_count(int64_t count);
  // Called by the trainer after each validation, with its metrics (named "validation_<name>");
  // updates what the schedule depends on besides the step count (on_validation), then writes the
  // rates. A scheduler that ignores validations leaves on_validation as it is.
  void observe_validation(const MetricValues& metrics);
  // The rate of each param group after the latest step.
  std::vector<double> get_last_lr() const;
  const Optimizer& optimizer() const { return optimizer_; }

  // Everything the rates depend on besides the constructor's arguments: {"step_count": n} plus
  // what a subclass adds. load_state(state()) restores the rates exactly (doubles round-trip).
  virtual nlohmann::json state() const;
  // Restores what state() returned and writes the rates. Throws Error naming the scheduler when
  // `state` lacks a field.
  virtual void load_state(const nlohmann::json& state);

  // The rate of a group whose base rate is `base_lr`, after `step` steps.
  virtual double rate(double base_lr, int64_t step) const { return base_lr * factor(step); }
  // The rate of param group `group`, whose base rate is `base_lr`, after `step` steps:
  // rate(base_lr, step) unless the schedule treats its groups apart (per-group floors).
  virtual double group_rate(size_t /*group*/, double base_lr, int64_t step) const {
    return rate(base_lr, step);
  }

 protected:
  // Multiplier of the base rates after `step` steps; 1 unless overridden.
  virtual double factor(int64_t /*step*/) const { return 1.0; }
  // See observe_validation.
  virtual void on_validation(const MetricValues& /*metrics*/) {}
  // Writes group_rate(i, base, step_count()) into every param group i. A scheduler whose rates
  // come from elsewhere (a wrapped torch::optim::LRScheduler) overrides it.
  virtual void apply();

 private:
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

// Multiplies the rate by gamma at each milestone (a step count; increasing, positive).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  double factor(int64_t step) const override;

 private:
  std::vector<int64_t> milestones_;
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

// Cosine annealing, PyTorch's closed form: rate = eta_min + (base - eta_min) * (1 + cos(pi *
// step / t_max)) / 2. Past t_max the cosine goes on (the rate rises again), as in PyTorch.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer optimizer, int64_t t_max, double eta_min = 0.0);
  double rate(double base_lr, int64_t step) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Cosine annealing with warm restarts (SGDR): cycles of t_0, t_0 * t_mult, t_0 * t_mult^2, ...
// steps; within a cycle of length T at position t, rate = eta_min + (base - eta_min) * (1 +
// cos(pi * t / T)) / 2, so each cycle restarts at the base rate.
class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(Optimizer optimizer, int64_t t_0, int64_t t_mult = 1,
                              double eta_min = 0.0);
  double rate(double base_lr, int64_t step) const override;

 private:
  int64_t t_0_;
  int64_t t_mult_;
  double eta_min_;
};

// Options of OneCycleLR, with the defaults of PyTorch's OneCycleLR.
struct OneCycleOptions {
  // The share of the steps in which the rate rises.
  TORCH_ARG(double, pct_start) = 0.3;
  // The first rate is peak / div_factor; the last, peak / (div_factor * final_div_factor).
  TORCH_ARG(double, div_factor) = 25.0;
  TORCH_ARG(double, final_div_factor) = 1e4;
  // Whether the momentum moves against the rate: from max_momentum down to base_momentum while
  // the rate rises, back up while it falls. It is SGD's and RMSprop's momentum, and the first beta
  // of Adam, AdamW and SparseAdam.
  TORCH_ARG(bool, cycle_momentum) = true;
  TORCH_ARG(double, base_momentum) = 0.85;
  TORCH_ARG(double, max_momentum) = 0.95;
};

// The 1cycle policy, as PyTorch's OneCycleLR with cosine annealing and two phases: the group's
// rate at construction is the peak; the rate starts at peak / div_factor, rises to the peak at
// step pct_start * total_steps - 1, then falls to peak / (div_factor * final_div_factor) at step
// total_steps - 1, and stays there. With cycle_momentum, every group's momentum follows the same
// two cosines from max_momentum to base_momentum and back, and stays at max_momentum; as in
// PyTorch, this sets the momentum of an SGD built without any. Throws crucible::Error unless
// total_steps > 0, 0 < pct_start < 1, pct_start * total_steps > 1 and both factors are positive,
// and, with cycle_momentum, when a group's optimizer has no momentum (Adagrad, Adadelta, LBFGS).
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer optimizer, int64_t total_steps, OneCycleOptions options = {});
  // OneCycleOptions with these three and cycle_momentum false: the momentum stays as the
  // optimizer has it.
  OneCycleLR(Optimizer optimizer, int64_t total_steps, double pct_start, double div_factor = 25.0,
             double final_div_factor = 1e4);
  double rate(double base_lr, int64_t step) const override;
  // The momentum of every group after `step` steps, with cycle_momentum.
  double momentum(int64_t step) const;
  bool cycles_momentum() const { return options_.cycle_momentum(); }

 protected:
  void apply() override;

 private:
  // Where `step` lies: in the rise (true) or not, and how far along its phase, from 0 to 1.
  std::pair<bool, double> phase(int64_t step) const;

  int64_t total_steps_;
  OneCycleOptions options_;
};

// Polynomial decay to end_factor * base over total_steps, then constant: rate = end + (base -
// end) * (1 - min(step, total_steps) / total_steps)^power.
class PolynomialLR : public LRScheduler {
 public:
  PolynomialLR(Optimizer optimizer, int64_t total_steps, double power = 1.0,
               double end_factor = 0.0);
  double rate(double base_lr, int64_t step) const override;

 private:
  int64_t total_steps_;
  double power_, end_factor_;
};

// Linear warm-up followed by another schedule: for step < warmup_steps the rate rises linearly
// from start_factor times `after`'s first rate to that rate; from then on it is `after`'s rate
// at step - warmup_steps. `after` must be built on the same optimizer and must not be wrapped
// itself; its state is part of this one's, and it sees every validation.
class LinearWarmup : public LRScheduler {
 public:
  LinearWarmup(std::shared_ptr<LRScheduler> after, int64_t warmup_steps, double start_factor = 0.0);
  template <class S, class = std::enable_if_t<std::is_base_of_v<LRScheduler, S>>>
  LinearWarmup(S after, int64_t warmup_steps, double start_factor = 0.0)
      : LinearWarmup(std::make_shared<S>(std::move(after)), warmup_steps, start_factor) {}

  double rate(double base_lr, int64_t step) const override;  // group 0's
  double group_rate(size_t group, double base_lr, int64_t step) const override;
  nlohmann::json state() const override;
  void load_state(const nlohmann::json& state) override;

 protected:
  void on_validation(const MetricValues& metrics) override;

 private:
  std::shared_ptr<LRScheduler> after_;
  int64_t warmup_steps_;
  double start_factor_;
};

// How ReduceLROnPlateau's threshold measures an improvement on the best value.
enum class ThresholdMode {
  kRelative,  // better than best * (1 - threshold), or best * (1 + threshold) when larger is better
  kAbsolute,  // better than best - threshold, or best + threshold when larger is better
};

// Options of ReduceLROnPlateau, with PyTorch's defaults.
struct PlateauOptions {
  // The validation metric to watch, as evaluate_batch names it or with its "validation_" prefix.
  TORCH_ARG(std::string, metric) = "validation_loss";
  TORCH_ARG(bool, smaller_is_better) = true;
  TORCH_ARG(double, factor) = 0.1;
  // Validations without improvement after which the rate drops.
  TORCH_ARG(int64_t, patience) = 10;
  // The margin by which a value must beat the best to improve on it, as threshold_mode says.
  TORCH_ARG(double, threshold) = 1e-4;
  TORCH_ARG(ThresholdMode, threshold_mode) = ThresholdMode::kRelative;
  // Validations to wait after a drop before counting bad ones again.
  TORCH_ARG(int64_t, cooldown) = 0;
  // No drop takes a group's rate below min_lr; a group that starts below it keeps its rate.
  TORCH_ARG(double, min_lr) = 0.0;
  // One floor per param group, in their order, in place of min_lr (PyTorch's list form); empty:
  // min_lr for every group.
  TORCH_ARG(std::vector<double>, min_lrs) = {};
};

// Multiplies the rate by factor when the watched validation metric has not improved for more
// than `patience` validations. It is fed by validations, not by steps: wrap it with any
// StepMode; its step count does not change its rate. As PyTorch's: each drop makes a group's
// rate max(rate * factor, floor) (its floor: min_lr, or its entry of min_lrs), and is not made
// when it would lower the rate by 1e-8 or less; before a first improvement the best is the worst
// value (+inf, or -inf when larger is better), and a NaN never improves. Throws crucible::Error
// when min_lrs is given with another size than the optimizer's param groups.
class ReduceLROnPlateau : public LRScheduler {
 public:
  ReduceLROnPlateau(Optimizer optimizer, PlateauOptions options = {});
  double rate(double base_lr, int64_t step) const override;  // group 0's
  double group_rate(size_t group, double base_lr, int64_t step) const override;
  nlohmann::json state() const override;
  void load_state(const nlohmann::json& state) override;
  // Times the rate was reduced.
  int64_t drops() const { return drops_; }

 protected:
  // Throws TrainingError naming the metric and the metrics present when it is missing.
  void on_validation(const MetricValues& metrics) override;

 private:
  PlateauOptions options_;
  std::optional<double> best_;
  int64_t bad_validations_ = 0;
  int64_t cooldown_left_ = 0;
  int64_t drops_ = 0;
};

}  // namespace lr
}  // namespace crucible
