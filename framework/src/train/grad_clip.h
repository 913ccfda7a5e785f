#pragma once

// Gradient clipping.

#include <vector>

#include <torch/torch.h>

#include <crucible/config.h>

namespace crucible::train {

// The total norm_type-norm of the defined gradients of `params` (0 when none is), as a
// one-element tensor on the first one's device, of float64 when a gradient is and float32
// otherwise; no host sync. Sparse gradients must be coalesced
// (coalesce_sparse_gradients).
torch::Tensor gradient_norm(const std::vector<torch::Tensor>& params, double norm_type);

// Throws crucible::Error naming the field when `clipping` is not one GradientClipping allows:
// both bounds set, a bound negative or NaN, or norm_type below 1 (or NaN).
void check_clipping(const GradientClipping& clipping);

// Clips the gradients of `params` in place as `clipping` says (see GradientClipping) and returns
// their total norm before clipping, of clipping.norm_type; no host sync. With max_norm, every
// gradient is multiplied by min(1, max_norm / (norm + 1e-6)), as PyTorch's clip_grad_norm_ does.
// Sparse gradients must be coalesced (coalesce_sparse_gradients).
torch::Tensor clip_gradients(const std::vector<torch::Tensor>& params,
                             const GradientClipping& clipping);

}  // namespace crucible::train
