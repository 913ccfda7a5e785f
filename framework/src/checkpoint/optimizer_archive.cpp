#include "checkpoint/optimizer_archive.h"

#include <string>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include <crucible/optimizers.h>

#include "optim/param_state.h"

namespace crucible::checkpoint {
namespace {

// The version string LibTorch's optimizer archives carry and their load() requires.
constexpr const char* kArchiveVersion = "1.5.0";

bool has_libtorch_layout(const torch::optim::Optimizer& optimizer) {
  const std::type_index type(typeid(optimizer));
  return type == typeid(torch::optim::SGD) || type == typeid(torch::optim::Adam) ||
         type == typeid(torch::optim::AdamW) || type == typeid(torch::optim::RMSprop) ||
         type == typeid(torch::optim::Adagrad) || type == typeid(torch::optim::LBFGS) ||
         type == typeid(optim::Adadelta) || type == typeid(optim::SparseAdam);
}

}  // namespace

void save_optimizer(const torch::optim::Optimizer& optimizer,
                    torch::serialize::OutputArchive& archive) {
  if (!has_libtorch_layout(optimizer)) {
    optimizer.save(archive);
    return;
  }
  // Each parameter's key: the position of its first appearance, so that a tensor in two groups
  // has one state under one key, as with LibTorch's address keys.
  std::unordered_map<const c10::TensorImpl*, std::string> keys;
  std::vector<const torch::Tensor*> in_order;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& parameter : group.params()) {
      if (keys.emplace(parameter.unsafeGetTensorImpl(), std::to_string(keys.size())).second) {
        in_order.push_back(&parameter);
      }
    }
  }
  archive.write("pytorch_version", c10::IValue(kArchiveVersion));

  torch::serialize::OutputArchive states(archive.compilation_unit());
  for (const torch::Tensor* parameter : in_order) {
    const auto found = optimizer.state().find(optim::detail::state_key(*parameter));
    if (found != optimizer.state().end()) {
      const auto& state = found->second;
      torch::serialize::OutputArchive one(archive.compilation_unit());
      state->serialize(one);
      states.write(keys.at(parameter->unsafeGetTensorImpl()), one);
    }
  }
  archive.write("state", states);

  torch::serialize::OutputArchive groups(archive.compilation_unit());
  const auto& param_groups = optimizer.param_groups();
  groups.write("param_groups/size", torch::tensor(static_cast<int64_t>(param_groups.size())));
  for (size_t i = 0; i < param_groups.size(); ++i) {
    const auto& params = param_groups[i].params();
    torch::serialize::OutputArchive group(archive.compilation_unit());
    group.write("params/size", torch::tensor(static_cast<int64_t>(params.size())));
    for (size_t j = 0; j < params.size(); ++j) {
      group.write("params/" + std::to_string(j),
                  c10::IValue(keys.at(params[j].unsafeGetTensorImpl())));
    }
    torch::serialize::OutputArchive options(archive.compilation_unit());
    param_groups[i].options().serialize(options);
    group.write("options", options);
    groups.write("param_groups/" + std::to_string(i), group);
  }
  archive.write("param_groups", groups);
}

}  // namespace crucible::checkpoint
