#include "train/grad_clip.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "train/gradient_values.h"

namespace crucible::train {

void check_clipping(const GradientClipping& clipping) {
  const auto refuse = [](const std::string& why) {
    throw Error("ctx.step_optimizer: GradientClipping " + why);
  };
  if (!(clipping.max_norm >= 0))
    refuse(fmt::format("max_norm is {}; a bound is a number >= 0", clipping.max_norm));
  if (!(clipping.max_value >= 0))
    refuse(fmt::format("max_value is {}; a bound is a number >= 0", clipping.max_value));
  if (!(clipping.norm_type >= 1)) {
    refuse(fmt::format("norm_type is {}; it must be >= 1, or infinity", clipping.norm_type));
  }
  if (clipping.max_norm > 0 && clipping.max_value > 0) {
    refuse("sets both max_norm and max_value; set one");
  }
}

torch::Tensor gradient_norm(const std::vector<torch::Tensor>& params, double norm_type) {
  const std::vector<torch::Tensor> grads = gradient_values(params);
  // Half gradients are measured in float32; float64 ones as PyTorch does, in their own type.
  const bool wide = std::any_of(grads.begin(), grads.end(), [](const torch::Tensor& g) {
    return g.scalar_type() == torch::kDouble;
  });
  const auto options = torch::TensorOptions(wide ? torch::kDouble : torch::kFloat)
                           .device(grads.empty() ? torch::Device(torch::kCPU) : grads[0].device());
  std::vector<torch::Tensor> norms;
  for (const auto& g : grads) {
    // An empty one (a sparse gradient without entries) adds nothing; its inf-norm would throw.
    if (g.numel() > 0) norms.push_back(g.detach().norm(norm_type).to(options));
  }
  if (norms.empty()) return torch::zeros({}, options);
  return torch::stack(norms).norm(norm_type);
}

torch::Tensor clip_gradients(const std::vector<torch::Tensor>& params,
                             const GradientClipping& clipping) {
  const torch::Tensor norm = gradient_norm(params, clipping.norm_type);
  if (clipping.max_norm > 0) {
    const torch::Tensor coef = (clipping.max_norm / (norm + 1e-6)).clamp_max(1.0);
    for (auto& g : gradient_values(params)) g.detach().mul_(coef.to(g.device(), g.dtype()));
  }
  if (clipping.max_value > 0) {
    for (auto& g : gradient_values(params)) {
      g.detach().clamp_(-clipping.max_value, clipping.max_value);
    }
  }
  return norm;
}

}  // namespace crucible::train
