#pragma once

#include <torch/torch.h>

namespace crucible::checkpoint {

// Writes `optimizer`'s state into `archive` so that equal states give equal bytes.
//
// For LibTorch's own optimizers (SGD, Adam, AdamW, RMSprop, Adagrad, LBFGS) and Crucible's
// (Adadelta, SparseAdam) the layout is the one their save() writes and load() reads, with each
// parameter keyed by the position of its first appearance among the optimizer's parameters (group
// by group) instead of by its address, and the states written in that order. A file so written
// loads with optimizer.load() into an optimizer over other tensors of the same groups, on
// LibTorch 1.x and 2.x alike. Any other optimizer class (a user's own, which may override save) is
// written by its own save().
void save_optimizer(const torch::optim::Optimizer& optimizer,
                    torch::serialize::OutputArchive& archive);

}  // namespace crucible::checkpoint
