#include <cmath>

#include <crucible/optimizers.h>

#include "optim/param_state.h"

namespace crucible::optim {
namespace {

using detail::read;
using detail::write;

// The sparse tensor of `size` that holds `values` at `indices` (unique: a coalesced tensor's). It
// is left uncoalesced, as torch.optim.SparseAdam's is: a dense tensor adds it through index_add,
// which honours the dense tensor's strides on every device.
torch::Tensor at_indices(const torch::Tensor& indices, const torch::Tensor& values,
                         torch::IntArrayRef size) {
  return torch::_sparse_coo_tensor_unsafe(indices, values, size,
                                          values.options().layout(torch::kSparse));
}

}  // namespace

void SparseAdamOptions::serialize(torch::serialize::OutputArchive& archive) const {
  write(archive, "lr", lr());
  write(archive, "beta1", std::get<0>(betas()));
  write(archive, "beta2", std::get<1>(betas()));
  write(archive, "eps", eps());
  write(archive, "maximize", maximize());
}

void SparseAdamOptions::serialize(torch::serialize::InputArchive& archive) {
  lr(read(archive, "lr").toDouble());
  betas(std::make_tuple(read(archive, "beta1").toDouble(), read(archive, "beta2").toDouble()));
  eps(read(archive, "eps").toDouble());
  maximize(read(archive, "maximize").toBool());
}

void SparseAdamParamState::serialize(torch::serialize::OutputArchive& archive) const {
  write(archive, "step", step());
  write(archive, "exp_avg", exp_avg());
  write(archive, "exp_avg_sq", exp_avg_sq());
}

void SparseAdamParamState::serialize(torch::serialize::InputArchive& archive) {
  step(read(archive, "step").toInt());
  exp_avg(read(archive, "exp_avg").toTensor());
  exp_avg_sq(read(archive, "exp_avg_sq").toTensor());
}

SparseAdam::SparseAdam(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                       SparseAdamOptions defaults)
    : Optimizer(std::move(param_groups), std::make_unique<SparseAdamOptions>(defaults)) {
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const auto& o = static_cast<const SparseAdamOptions&>(param_groups_[g].options());
    const auto [beta1, beta2] = o.betas();
    TORCH_CHECK(o.lr() > 0, "SparseAdam: invalid learning rate ", o.lr(), " in group ", g,
                " (it must be > 0)");
    TORCH_CHECK(o.eps() > 0, "SparseAdam: invalid eps ", o.eps(), " in group ", g,
                " (it must be > 0)");
    TORCH_CHECK(beta1 >= 0 && beta1 < 1, "SparseAdam: invalid beta1 ", beta1, " in group ", g,
                " (0 <= beta1 < 1)");
    TORCH_CHECK(beta2 >= 0 && beta2 < 1, "SparseAdam: invalid beta2 ", beta2, " in group ", g,
                " (0 <= beta2 < 1)");
  }
  detail::require_dense_real_parameters(param_groups_, "SparseAdam");
}

torch::Tensor SparseAdam::step(LossClosure closure) {
  const torch::NoGradGuard no_grad;
  torch::Tensor loss = detail::run_closure(closure);
  detail::require_gradient_layout(param_groups_, "SparseAdam", /*sparse=*/true,
                                  "SparseAdam takes sparse gradients only (those of an Embedding "
                                  "or EmbeddingBag with sparse(true)); step dense ones with Adam");
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const SparseAdamOptions&>(group.options());
    const auto [beta1, beta2] = o.betas();
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& s = detail::state_of<SparseAdamParamState>(state_, p, [&] {
        auto fresh = std::make_unique<SparseAdamParamState>();
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        return fresh;
      });
      s.step(s.step() + 1);  // an empty gradient counts too, as in PyTorch
      const torch::Tensor grad = (o.maximize() ? -p.grad() : p.grad()).coalesce();
      const torch::Tensor values = grad._values();
      if (values.numel() == 0) continue;
      const torch::Tensor indices = grad._indices();

      // Only the gradient's rows: m += (1 - beta1) (g - m), v += (1 - beta2) (g^2 - v).
      const torch::Tensor old_avg = s.exp_avg().sparse_mask(grad)._values();
      const torch::Tensor avg_change = values.sub(old_avg).mul_(1 - beta1);
      s.exp_avg().add_(at_indices(indices, avg_change, grad.sizes()));
      const torch::Tensor old_avg_sq = s.exp_avg_sq().sparse_mask(grad)._values();
      const torch::Tensor avg_sq_change = values.pow(2).sub_(old_avg_sq).mul_(1 - beta2);
      s.exp_avg_sq().add_(at_indices(indices, avg_sq_change, grad.sizes()));

      // The rows' new moments, from the changes (the same sums the adds above made).
      const torch::Tensor numerator = avg_change.add_(old_avg);
      const torch::Tensor denominator = avg_sq_change.add_(old_avg_sq).sqrt_().add_(o.eps());
      const double step = static_cast<double>(s.step());
      const double correction1 = 1 - std::pow(beta1, step);
      const double correction2 = 1 - std::pow(beta2, step);
      const double step_size = o.lr() * std::sqrt(correction2) / correction1;
      p.add_(at_indices(indices, numerator.div_(denominator).mul_(-step_size), grad.sizes()));
    }
  }
  return loss;
}

void SparseAdam::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<SparseAdamParamState, SparseAdamOptions>(archive, *this);
}

void SparseAdam::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<SparseAdamParamState, SparseAdamOptions>(archive, *this);
  detail::load_group_options<SparseAdamOptions>(archive, *this);
}

}  // namespace crucible::optim
