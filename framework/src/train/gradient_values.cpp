#include "train/gradient_values.h"

namespace crucible::train {

std::vector<torch::Tensor> sparse_gradient_parameters(
    const std::vector<std::shared_ptr<torch::nn::Module>>& models) {
  std::vector<torch::Tensor> out;
  const auto add = [&](const torch::Tensor& weight) {
    for (const auto& t : out) {
      if (t.unsafeGetTensorImpl() == weight.unsafeGetTensorImpl()) return;
    }
    out.push_back(weight);
  };
  for (const auto& model : models) {
    for (const auto& m : model->modules(/*include_self=*/true)) {
      if (const auto* e = dynamic_cast<const torch::nn::EmbeddingImpl*>(m.get())) {
        if (e->options.sparse()) add(e->weight);
      } else if (const auto* b = dynamic_cast<const torch::nn::EmbeddingBagImpl*>(m.get())) {
        if (b->options.sparse()) add(b->weight);
      }
    }
  }
  return out;
}

void coalesce_sparse_gradients(const std::vector<torch::Tensor>& params) {
  for (const auto& p : params) {
    const torch::Tensor& g = p.grad();
    if (g.defined() && g.is_sparse() && !g.is_coalesced()) {
      torch::Tensor(p).mutable_grad() = g.coalesce();
    }
  }
}

std::vector<torch::Tensor> gradient_values(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) {
    const torch::Tensor& g = p.grad();
    if (g.defined()) out.push_back(g.is_sparse() ? g._values() : g);
  }
  return out;
}

}  // namespace crucible::train
