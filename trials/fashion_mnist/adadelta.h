#pragma once

// Adadelta (Zeiler 2012), the optimizer of Determined's MNIST tutorial, which LibTorch's C++
// frontend does not provide. It follows torch.optim.Adadelta's update (single-tensor form) and its
// per-parameter state (step, square_avg, acc_delta) is saved and loaded through the optimizer's
// save/load, so a checkpointed run resumes bitwise.

#include <torch/torch.h>

namespace fashion_mnist {

struct AdadeltaOptions : torch::optim::OptimizerCloneableOptions<AdadeltaOptions> {
  AdadeltaOptions(double lr = 1.0) : lr_(lr) {}  // NOLINT: implicit like LibTorch's options
  TORCH_ARG(double, lr) = 1.0;
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
  // Requires lr >= 0, 0 <= rho <= 1, eps >= 0 and weight_decay >= 0; throws c10::Error otherwise.
  explicit Adadelta(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                    AdadeltaOptions defaults = {});
  explicit Adadelta(std::vector<torch::Tensor> params, AdadeltaOptions defaults = {})
      : Adadelta({torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {}

  // One update of every parameter that has a gradient, with its group's options. Creates a
  // parameter's state at its first update. Returns the closure's loss (undefined without one).
  torch::Tensor step(LossClosure closure = nullptr) override;

  // Writes (reads) every parameter's state and every group's options; load requires the same
  // parameter groups, in the same order and of the same sizes, as the optimizer that saved.
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;
};

}  // namespace fashion_mnist
