#include "optim/param_state.h"

namespace crucible::optim::detail {
namespace {

std::string describe_layout(const torch::Tensor& grad) {
  if (grad.layout() == torch::kStrided) return "a dense gradient";
  if (grad.layout() == torch::kSparse) return "a sparse gradient";
  return c10::str("a gradient of layout ", grad.layout());
}

}  // namespace

void require_gradient_layout(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                             const char* optimizer, bool sparse, const char* hint) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      const torch::Tensor& grad = params[i].grad();
      if (!grad.defined() || (sparse ? grad.is_sparse() : grad.layout() == torch::kStrided)) {
        continue;
      }
      TORCH_CHECK(false, optimizer, ": parameter ", i, " of group ", g, " has ",
                  describe_layout(grad), "; ", hint);
    }
  }
}

void require_dense_real_parameters(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                                   const char* optimizer) {
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& params = groups[g].params();
    for (size_t i = 0; i < params.size(); ++i) {
      TORCH_CHECK(params[i].layout() == torch::kStrided, optimizer, ": parameter ", i, " of group ",
                  g, " is a sparse tensor; ", optimizer, " requires dense parameters");
      TORCH_CHECK(!params[i].is_complex(), optimizer, ": parameter ", i, " of group ", g,
                  " is complex; ", optimizer, " requires real parameters");
    }
  }
}

}  // namespace crucible::optim::detail
