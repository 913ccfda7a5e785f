#include "checkpoint/state_dict.h"

#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <crucible/errors.h>

#include "checkpoint/tensor_files.h"
#include "checkpoint/zip_layout.h"
#include "util/error_text.h"

namespace crucible::checkpoint {

namespace {

std::map<std::string, torch::Tensor> named_state(const torch::nn::Module& module) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : module.named_parameters(true)) out[p.key()] = p.value();
  for (const auto& b : module.named_buffers(true)) out[b.key()] = b.value();
  return out;
}

std::string shape(const torch::Tensor& t) {
  return fmt::format("[{}]", fmt::join(t.sizes().begin(), t.sizes().end(), ", "));
}

}  // namespace

NamedTensors state_dict(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& [name, tensor] : named_state(module)) out.emplace_back(name, tensor);
  return out;
}

void load_state_dict(torch::nn::Module& module, const std::vector<char>& bytes,
                     const std::string& source) {
  check_zip_layout(std::string_view(bytes.data(), bytes.size()), source);
  c10::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw TrainingError(
        fmt::format("{}: not a readable state dict: {}", source, util::first_line(e)));
  }
  if (!value.isGenericDict()) {
    throw TrainingError(fmt::format("{}: not a state dict (a dict of name to tensor)", source));
  }
  std::map<std::string, torch::Tensor> saved;
  for (const auto& kv : value.toGenericDict()) {
    if (!kv.key().isString() || !kv.value().isTensor()) {
      throw TrainingError(fmt::format("{}: not a state dict (a dict of name to tensor)", source));
    }
    check_extent(kv.value().toTensor(), source, kv.key().toStringRef());
    saved[kv.key().toStringRef()] = kv.value().toTensor();
  }
  auto target = named_state(module);
  std::vector<std::string> problems;
  for (const auto& [name, tensor] : target) {
    auto it = saved.find(name);
    if (it == saved.end()) {
      problems.push_back(fmt::format("missing {} {}", name, shape(tensor)));
    } else if (it->second.sizes() != tensor.sizes()) {
      problems.push_back(fmt::format("shape of {}: checkpoint {}, model {}", name,
                                     shape(it->second), shape(tensor)));
    }
  }
  for (const auto& [name, tensor] : saved) {
    if (!target.count(name))
      problems.push_back(fmt::format("unexpected {} {}", name, shape(tensor)));
  }
  if (!problems.empty()) {
    std::string list;
    for (const auto& p : problems) list += "\n  " + p;
    throw TrainingError(
        fmt::format("{}: the state dict does not match the model:{}", source, list));
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : target) tensor.copy_(saved.at(name));
}

}  // namespace crucible::checkpoint
