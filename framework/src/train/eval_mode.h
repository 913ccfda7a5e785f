#pragma once

#include <memory>
#include <utility>
#include <vector>

#include <torch/nn/module.h>

namespace crucible::train {

// Puts the given models, with every submodule, in evaluation mode for its lifetime. When it ends,
// however the scope is left, each module and submodule has the training flag it had before again:
// a submodule the trial keeps in evaluation mode (a frozen batch norm) stays there, and a model
// the trial left in training mode is back in it even when validation threw.
class EvalModeScope {
 public:
  explicit EvalModeScope(const std::vector<std::shared_ptr<torch::nn::Module>>& models);
  ~EvalModeScope();
  EvalModeScope(const EvalModeScope&) = delete;
  EvalModeScope& operator=(const EvalModeScope&) = delete;

 private:
  // Each module before its submodules, so that restoring in this order lets every module's own
  // flag win over the one its parent passed down.
  std::vector<std::pair<std::shared_ptr<torch::nn::Module>, bool>> modes_;
};

}  // namespace crucible::train
