#include <crucible/model_ema.h>

#include <fmt/format.h>

#include <crucible/errors.h>

namespace crucible {
namespace {

// The parameters (or buffers) of `model` beside those of `average` with the same names; throws
// Error naming the first of either that the other lacks or holds with another shape or dtype.
std::vector<std::pair<torch::Tensor, torch::Tensor>> pair_up(
    const torch::OrderedDict<std::string, torch::Tensor>& average,
    const torch::OrderedDict<std::string, torch::Tensor>& model, const char* kind) {
  if (average.size() != model.size()) {
    throw Error(fmt::format("ModelEma: the average has {} {}, the model {}", average.size(), kind,
                            model.size()));
  }
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
  for (const auto& item : model) {
    const torch::Tensor* a = average.find(item.key());
    if (a == nullptr) {
      throw Error(fmt::format("ModelEma: the average has no {} '{}', which the model has", kind,
                              item.key()));
    }
    if (a->sizes() != item.value().sizes() || a->dtype() != item.value().dtype()) {
      throw Error(fmt::format("ModelEma: {} '{}' is {} of {} in the average, {} of {} in the model",
                              kind, item.key(), c10::str(a->sizes()),
                              std::string(a->dtype().name()), c10::str(item.value().sizes()),
                              std::string(item.value().dtype().name())));
    }
    out.emplace_back(*a, item.value());
  }
  return out;
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
  if (!optimizer_) throw Error("ModelEma: no optimizer to follow");
  for (auto& pair : pair_up(average->named_parameters(), model->named_parameters(), "parameters")) {
    pair.first.requires_grad_(false);
    averaged_.push_back(std::move(pair));
  }
  for (auto& pair : pair_up(average->named_buffers(), model->named_buffers(), "buffers")) {
    (pair.first.is_floating_point() ? averaged_ : copied_).push_back(std::move(pair));
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
