#include <crucible/model_ema.h>

#include <algorithm>
#include <unordered_set>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "train/trial_state.h"

namespace crucible {
namespace {

using Pairs = std::vector<std::pair<torch::Tensor, torch::Tensor>>;

// The first name of `named` that `other` lacks; "" when there is none.
std::string first_missing(const torch::OrderedDict<std::string, torch::Tensor>& named,
                          const torch::OrderedDict<std::string, torch::Tensor>& other) {
  for (const auto& item : named) {
    if (other.find(item.key()) == nullptr) return item.key();
  }
  return "";
}

// The tensors of `model` (its parameters or its buffers: `kind`) beside those of `average` of the
// same names, each tensor once (a tied weight appears under several names). Throws Error naming
// the first tensor that one of them lacks or that the two hold with another shape, dtype or
// device.
Pairs pair_up(const torch::OrderedDict<std::string, torch::Tensor>& average,
              const torch::OrderedDict<std::string, torch::Tensor>& model, const char* kind) {
  for (const auto& [lacking, other, name] :
       {std::make_tuple("average", "model", first_missing(model, average)),
        std::make_tuple("model", "average", first_missing(average, model))}) {
    if (!name.empty()) {
      throw Error(fmt::format("ModelEma: the {} has no {} '{}', which the {} has", lacking, kind,
                              name, other));
    }
  }
  Pairs out;
  std::unordered_set<const void*> seen;
  for (const auto& item : model) {
    const torch::Tensor& a = *average.find(item.key());
    const torch::Tensor& m = item.value();
    if (a.sizes() != m.sizes() || a.dtype() != m.dtype() || a.device() != m.device()) {
      throw Error(fmt::format(
          "ModelEma: {} '{}' is {} {} on {} in the average and {} {} on {} in "
          "the model",
          kind, item.key(), c10::str(a.sizes()), std::string(a.dtype().name()), a.device().str(),
          c10::str(m.sizes()), std::string(m.dtype().name()), m.device().str()));
    }
    if (seen.insert(m.unsafeGetTensorImpl()).second) out.emplace_back(a, m);
  }
  return out;
}

// Throws Error when the average shares a tensor with the model (the same module in both).
void require_apart(const Pairs& pairs, const std::unordered_set<const void*>& model_tensors) {
  for (const auto& [average, model] : pairs) {
    if (model_tensors.count(average.unsafeGetTensorImpl())) {
      throw Error(
          "ModelEma: the average shares weights with the model; it must be a second instance "
          "of the model's network");
    }
  }
}

}  // namespace

ModelEma::ModelEma(const TrialContext& ctx, std::shared_ptr<torch::nn::Module> model,
                   std::shared_ptr<torch::nn::Module> average, Optimizer optimizer,
                   ModelEmaOptions options)
    : ctx_(ctx), optimizer_(std::move(optimizer)), options_(options) {
  if (!(options.decay() >= 0 && options.decay() <= 1)) {
    throw Error(fmt::format("ModelEma: decay {} is outside [0, 1]", options.decay()));
  }
  if (!model || !average || model == average) {
    throw Error("ModelEma: the average must be a second instance of the model's network");
  }
  const detail::TrialState& state = detail::TrialContextAccess::state(ctx);
  const auto wrapped = [&](const std::shared_ptr<torch::nn::Module>& m) {
    return std::find(state.models.begin(), state.models.end(), m) != state.models.end();
  };
  if (!wrapped(model) || !wrapped(average)) {
    throw Error(
        fmt::format("ModelEma: the {} is not a wrapped model; wrap both networks with "
                    "ctx.wrap_model before building the ModelEma",
                    wrapped(model) ? "average" : "model"));
  }
  if (std::find(state.optimizers.begin(), state.optimizers.end(), optimizer_) ==
      state.optimizers.end()) {
    throw Error("ModelEma: its optimizer is not a wrapped optimizer (ctx.wrap_optimizer)");
  }
  Pairs parameters = pair_up(average->named_parameters(), model->named_parameters(), "parameter");
  Pairs buffers = pair_up(average->named_buffers(), model->named_buffers(), "buffer");
  std::unordered_set<const void*> model_tensors;
  for (const auto* pairs : {&parameters, &buffers}) {
    for (const auto& [a, m] : *pairs) model_tensors.insert(m.unsafeGetTensorImpl());
  }
  require_apart(parameters, model_tensors);
  require_apart(buffers, model_tensors);
  const torch::NoGradGuard no_grad;
  for (auto& pair : parameters) {
    pair.first.requires_grad_(false);
    averaged_.push_back(std::move(pair));
  }
  for (auto& pair : buffers) {
    (pair.first.is_floating_point() ? averaged_ : copied_).push_back(std::move(pair));
  }
  // The average starts as the model, as a copy of it would (a resume then restores its own).
  for (auto* pairs : {&averaged_, &copied_}) {
    for (auto& [a, m] : *pairs) a.copy_(m);
  }
}

void ModelEma::on_training_batch_end(int64_t, const Metrics&) {
  if (!ctx_.optimizer_stepped(optimizer_)) return;
  const torch::NoGradGuard no_grad;
  for (auto& [average, current] : averaged_) {
    if (updates_ == 0) {
      average.copy_(current);
    } else {
      average.lerp_(current, 1 - options_.decay());
    }
  }
  for (auto& [average, current] : copied_) average.copy_(current);
  ++updates_;
}

void ModelEma::save_state(torch::serialize::OutputArchive& archive) {
  archive.write("updates", torch::tensor(updates_));
}

void ModelEma::load_state(torch::serialize::InputArchive& archive) {
  torch::Tensor updates;
  archive.read("updates", updates);
  updates_ = updates.item<int64_t>();
}

}  // namespace crucible
