#pragma once

// Gradients whatever their layout: which parameters get sparse ones (the gradient sync averages
// them apart), and the gradients that an optimizer step inspects or changes (clipping, the loss
// scaler, the non-finite check).

#include <memory>
#include <vector>

#include <torch/torch.h>

namespace crucible::train {

// The parameters of `models` (and their submodules) that backward gives sparse gradients: the
// weights of every Embedding and EmbeddingBag built with sparse=true, once each, in module order.
std::vector<torch::Tensor> sparse_gradient_parameters(
    const std::vector<std::shared_ptr<torch::nn::Module>>& models);

// Replaces each sparse gradient of `params` (an Embedding with sparse=true) by its coalesced
// form, in which no index appears twice, so that its values are the gradient's entries.
void coalesce_sparse_gradients(const std::vector<torch::Tensor>& params);

// The defined gradients of `params` as dense tensors that share their memory: a dense gradient
// itself, a sparse one its values. Changing them in place changes the gradients. A norm or a
// finiteness test of them is the gradients' when the sparse ones are coalesced.
std::vector<torch::Tensor> gradient_values(const std::vector<torch::Tensor>& params);

}  // namespace crucible::train
