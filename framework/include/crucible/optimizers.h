#pragma once

// Optimizers that LibTorch's C++ frontend lacks, with torch.optim's updates (its single-tensor
// form) and per-parameter state. Each saves and loads every parameter's state and every group's
// options through Optimizer::save and load, so a checkpointed run resumes bitwise; wrap them with
// TrialContext::wrap_optimizer like LibTorch's own. Bad options throw c10::Error (as LibTorch's
// optimizers do), naming the option and its value.

#include <cstdint>
#include <tuple>
#include <vector>

#include <torch/torch.h>

namespace crucible::optim {

// ---------------------------------------------------------------------------------------------
// Adadelta (Zeiler 2012; torch.optim.Adadelta), the optimizer of Determined's MNIST tutorial.

struct AdadeltaOptions : torch::optim::OptimizerCloneableOptions<AdadeltaOptions> {
  AdadeltaOptions(double lr = 1.0) : lr_(lr) {}  // NOLINT: implicit like LibTorch's options
  TORCH_ARG(double, lr) = 1.0;
  // Decay of the running means of squared gradients and of squared updates.
  TORCH_ARG(double, rho) = 0.9;
  TORCH_ARG(double, eps) = 1e-6;
  TORCH_ARG(double, weight_decay) = 0;

 public:  // TORCH_ARG leaves its members private
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct AdadeltaParamState : torch::optim::OptimizerCloneableParamState<AdadeltaParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, square_avg);  // running mean of squared gradients
  TORCH_ARG(torch::Tensor, acc_delta);   // running mean of squared updates

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

class Adadelta : public torch::optim::Optimizer {
 public:
  // Requires lr >= 0, 0 <= rho <= 1, eps >= 0 and weight_decay >= 0 in every group, and dense,
  // real parameters. (Groups added later with add_param_group are not checked.)
  explicit Adadelta(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                    AdadeltaOptions defaults = {});
  explicit Adadelta(std::vector<torch::Tensor> params, AdadeltaOptions defaults = {})
      : Adadelta({torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {}

  // One update of every parameter that has a gradient, with its group's options. Every such
  // gradient must be dense: a sparse one throws c10::Error, naming the parameter's group and place
  // in it, before any parameter is updated. Creates a parameter's state at its first step with a
  // gradient. Returns the closure's loss (undefined without one).
  torch::Tensor step(LossClosure closure = nullptr) override;

  // Writes (reads) every parameter's state and every group's options; load requires the same
  // parameter groups, in the same order and of the same sizes, as the optimizer that saved.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

// ---------------------------------------------------------------------------------------------
// SparseAdam (torch.optim.SparseAdam): Adam for parameters whose gradients are sparse, such as
// the weight of an Embedding or EmbeddingBag with sparse(true). It is lazy: a step updates the
// moment estimates and the values of only the rows its gradient holds, at a cost that grows with
// those rows, not with the table. As in PyTorch, the bias correction uses the parameter's own step
// count, which counts every step in which the parameter had a gradient (an empty one included).

struct SparseAdamOptions : torch::optim::OptimizerCloneableOptions<SparseAdamOptions> {
  using betas_t = std::tuple<double, double>;
  SparseAdamOptions(double lr = 1e-3) : lr_(lr) {}  // NOLINT: implicit like LibTorch's options
  TORCH_ARG(double, lr) = 1e-3;
  // Decay of the running means of the gradient and of its square.
  TORCH_ARG(betas_t, betas) = std::make_tuple(0.9, 0.999);
  TORCH_ARG(double, eps) = 1e-8;
  // Maximize the objective: step along the gradient, not against it.
  TORCH_ARG(bool, maximize) = false;

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
  double get_lr() const override { return lr(); }
  void set_lr(const double lr) override { this->lr(lr); }
};

struct SparseAdamParamState : torch::optim::OptimizerCloneableParamState<SparseAdamParamState> {
  TORCH_ARG(int64_t, step) = 0;
  TORCH_ARG(torch::Tensor, exp_avg);     // running mean of the gradient, dense
  TORCH_ARG(torch::Tensor, exp_avg_sq);  // running mean of the squared gradient, dense

 public:
  void serialize(torch::serialize::InputArchive& archive) override;
  void serialize(torch::serialize::OutputArchive& archive) const override;
};

class SparseAdam : public torch::optim::Optimizer {
 public:
  // Requires lr > 0, eps > 0 and 0 <= beta < 1 for both betas in every group, and dense, real
  // parameters. (Groups added later with add_param_group are not checked.)
  explicit SparseAdam(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                      SparseAdamOptions defaults = {});
  explicit SparseAdam(std::vector<torch::Tensor> params, SparseAdamOptions defaults = {})
      : SparseAdam({torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {}

  // One update of every parameter that has a gradient, with its group's options. Every such
  // gradient must be sparse: a dense one throws c10::Error, naming the parameter's group and
  // place in it, before any parameter is updated. Creates a parameter's state at its first step
  // with a gradient (an empty one too). Returns the closure's loss (undefined without one).
  torch::Tensor step(LossClosure closure = nullptr) override;

  // As Adadelta's.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace crucible::optim
