#include <crucible/optimizers.h>

#include "optim/param_state.h"

namespace crucible::optim {

using detail::read;
using detail::write;

void AdadeltaOptions::serialize(torch::serialize::OutputArchive& archive) const {
  write(archive, "lr", lr());
  write(archive, "rho", rho());
  write(archive, "eps", eps());
  write(archive, "weight_decay", weight_decay());
}

void AdadeltaOptions::serialize(torch::serialize::InputArchive& archive) {
  lr(read(archive, "lr").toDouble());
  rho(read(archive, "rho").toDouble());
  eps(read(archive, "eps").toDouble());
  weight_decay(read(archive, "weight_decay").toDouble());
}

void AdadeltaParamState::serialize(torch::serialize::OutputArchive& archive) const {
  write(archive, "step", step());
  write(archive, "square_avg", square_avg());
  write(archive, "acc_delta", acc_delta());
}

void AdadeltaParamState::serialize(torch::serialize::InputArchive& archive) {
  step(read(archive, "step").toInt());
  square_avg(read(archive, "square_avg").toTensor());
  acc_delta(read(archive, "acc_delta").toTensor());
}

Adadelta::Adadelta(std::vector<torch::optim::OptimizerParamGroup> param_groups,
                   AdadeltaOptions defaults)
    : Optimizer(std::move(param_groups), std::make_unique<AdadeltaOptions>(defaults)) {
  for (size_t g = 0; g < param_groups_.size(); ++g) {
    const auto& o = static_cast<const AdadeltaOptions&>(param_groups_[g].options());
    TORCH_CHECK(o.lr() >= 0, "Adadelta: invalid learning rate ", o.lr(), " in group ", g,
                " (it must be >= 0)");
    TORCH_CHECK(o.rho() >= 0 && o.rho() <= 1, "Adadelta: invalid rho ", o.rho(), " in group ", g,
                " (0 <= rho <= 1)");
    TORCH_CHECK(o.eps() >= 0, "Adadelta: invalid eps ", o.eps(), " in group ", g,
                " (it must be >= 0)");
    TORCH_CHECK(o.weight_decay() >= 0, "Adadelta: invalid weight_decay ", o.weight_decay(),
                " in group ", g, " (it must be >= 0)");
  }
  detail::require_dense_real_parameters(param_groups_, "Adadelta");
}

torch::Tensor Adadelta::step(LossClosure closure) {
  const torch::NoGradGuard no_grad;
  torch::Tensor loss = detail::run_closure(closure);
  detail::require_gradient_layout(param_groups_, "Adadelta", /*sparse=*/false,
                                  "Adadelta takes dense gradients only; step sparse ones with "
                                  "crucible::optim::SparseAdam");
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const AdadeltaOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      torch::Tensor grad = p.grad();
      if (o.weight_decay() != 0) grad = grad.add(p, o.weight_decay());
      auto& s = detail::state_of<AdadeltaParamState>(state_, p, [&] {
        auto fresh = std::make_unique<AdadeltaParamState>();
        fresh->square_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->acc_delta(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        return fresh;
      });
      s.step(s.step() + 1);
      s.square_avg().mul_(o.rho()).addcmul_(grad, grad, 1 - o.rho());
      const torch::Tensor std = s.square_avg().add(o.eps()).sqrt_();
      const torch::Tensor delta = s.acc_delta().add(o.eps()).sqrt_().div_(std).mul_(grad);
      s.acc_delta().mul_(o.rho()).addcmul_(delta, delta, 1 - o.rho());
      p.add_(delta, -o.lr());
    }
  }
  return loss;
}

void Adadelta::save(torch::serialize::OutputArchive& archive) const {
  torch::optim::serialize<AdadeltaParamState, AdadeltaOptions>(archive, *this);
}

void Adadelta::load(torch::serialize::InputArchive& archive) {
  torch::optim::serialize<AdadeltaParamState, AdadeltaOptions>(archive, *this);
  detail::load_group_options<AdadeltaOptions>(archive, *this);
}

}  // namespace crucible::optim
