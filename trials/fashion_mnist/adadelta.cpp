#include "adadelta.h"

#include <type_traits>

namespace fashion_mnist {
namespace {

using StateKey = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

// The key of a parameter's state: LibTorch 1.x keys by the printed TensorImpl address, 2.x by the
// address itself.
template <class Key = StateKey>
Key state_key(const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    return c10::str(p.unsafeGetTensorImpl());
  } else {
    return p.unsafeGetTensorImpl();
  }
}

void write(torch::serialize::OutputArchive& archive, const char* key, const c10::IValue& v) {
  archive.write(key, v);
}

c10::IValue read(torch::serialize::InputArchive& archive, const char* key) {
  c10::IValue v;
  archive.read(key, v);
  return v;
}

}  // namespace

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
  TORCH_CHECK(defaults.lr() >= 0, "Adadelta: invalid learning rate ", defaults.lr());
  TORCH_CHECK(defaults.rho() >= 0 && defaults.rho() <= 1, "Adadelta: invalid rho ", defaults.rho());
  TORCH_CHECK(defaults.eps() >= 0, "Adadelta: invalid eps ", defaults.eps());
  TORCH_CHECK(defaults.weight_decay() >= 0, "Adadelta: invalid weight_decay ",
              defaults.weight_decay());
}

torch::Tensor Adadelta::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const AdadeltaOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      torch::Tensor grad = p.grad();
      if (o.weight_decay() != 0) grad = grad.add(p, o.weight_decay());
      auto& slot = state_[state_key(p)];
      if (!slot) {
        auto fresh = std::make_unique<AdadeltaParamState>();
        fresh->square_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->acc_delta(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& s = static_cast<AdadeltaParamState&>(*slot);
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
}

}  // namespace fashion_mnist
