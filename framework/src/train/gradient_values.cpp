#include "train/gradient_values.h"

namespace crucible::train {

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
