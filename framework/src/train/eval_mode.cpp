#include "train/eval_mode.h"

namespace crucible::train {

EvalModeScope::EvalModeScope(const std::vector<std::shared_ptr<torch::nn::Module>>& models) {
  for (const auto& model : models) {
    for (const auto& module : model->modules(/*include_self=*/true)) {
      modes_.emplace_back(module, module->is_training());
    }
  }
  for (const auto& model : models) model->eval();
}

EvalModeScope::~EvalModeScope() {
  for (const auto& [module, training] : modes_) module->train(training);
}

}  // namespace crucible::train
