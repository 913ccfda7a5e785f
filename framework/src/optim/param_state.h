#pragma once

// What Crucible's optimizers share: the key of a parameter's state in Optimizer::state(), which
// differs between LibTorch generations, a parameter's state made on its first step, and the
// closure a step runs, and the archive reads and writes of their options and states.

#include <memory>
#include <type_traits>

#include <torch/torch.h>

namespace crucible::optim::detail {

using StateKey = std::decay_t<decltype(std::declval<torch::optim::Optimizer&>().state())>::key_type;

// The key of `p`'s state: LibTorch 1.x keys by the printed TensorImpl address, 2.x by the address
// itself.
template <class Key = StateKey>
Key state_key(const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    return c10::str(p.unsafeGetTensorImpl());
  } else {
    return p.unsafeGetTensorImpl();
  }
}

// The state of `p` in `state`, made by make() when `p` has none yet.
template <class State, class Make>
State& state_of(decltype(std::declval<torch::optim::Optimizer&>().state())& state,
                const torch::Tensor& p, const Make& make) {
  auto& slot = state[state_key(p)];
  if (!slot) slot = make();
  return static_cast<State&>(*slot);
}

// The loss `closure` returns, with gradients enabled; undefined without a closure.
inline torch::Tensor run_closure(const torch::optim::Optimizer::LossClosure& closure) {
  if (!closure) return {};
  const torch::AutoGradMode enable_grad(true);
  return closure();
}

// Sets the options of each param group of `optimizer` to those `archive` holds, which
// torch::optim::serialize wrote (LibTorch 2.x's load does the same; 1.x's keeps the optimizer's
// own). Requires as many groups in the archive as in the optimizer, and options of type Options.
template <class Options>
void load_group_options(torch::serialize::InputArchive& archive,
                        torch::optim::Optimizer& optimizer) {
  torch::serialize::InputArchive groups;
  archive.read("param_groups", groups);
  for (size_t i = 0; i < optimizer.param_groups().size(); ++i) {
    torch::serialize::InputArchive group;
    torch::serialize::InputArchive options;
    groups.read("param_groups/" + std::to_string(i), group);
    group.read("options", options);
    static_cast<Options&>(optimizer.param_groups()[i].options()).serialize(options);
  }
}

// Throws c10::Error, naming the optimizer, the parameter and its group, when the gradient of a
// parameter of `groups` is not of the layout `optimizer` steps (sparse COO when `sparse`, else
// dense); `hint` says what to do instead. Checks every group before the caller updates any.
void require_gradient_layout(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                             const char* optimizer, bool sparse, const char* hint);

// Throws c10::Error, naming the parameter and its group, when a parameter of `groups` is sparse
// or complex: Crucible's optimizers update dense real tensors.
void require_dense_real_parameters(const std::vector<torch::optim::OptimizerParamGroup>& groups,
                                   const char* optimizer);

inline void write(torch::serialize::OutputArchive& archive, const char* key, const c10::IValue& v) {
  archive.write(key, v);
}

// The value under `key`; throws c10::Error when the archive has none.
inline c10::IValue read(torch::serialize::InputArchive& archive, const char* key) {
  c10::IValue v;
  archive.read(key, v);
  return v;
}

}  // namespace crucible::optim::detail
