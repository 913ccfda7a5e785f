#include <crucible/errors.h>
#include <crucible/trial.h>
#include <crucible/trial_context.h>

#include <algorithm>

#include <fmt/format.h>

#include "config/suggest.h"
#include "config/yaml_reader.h"
#include "train/autocast.h"
#include "train/grad_clip.h"
#include "train/torch_lr_scheduler.h"
#include "train/trial_state.h"
#include "util/utf8.h"

namespace crucible {

Metrics Trial::evaluate_batch(Batch&, int64_t) {
  throw Error("the trial does not implement evaluate_batch");
}

Metrics Trial::evaluate_full_dataset(DataLoader&) {
  throw Error("the trial does not implement evaluate_full_dataset");
}

torch::Tensor Trial::predict_batch(Batch&, int64_t) {
  throw Error("the trial does not implement predict_batch");
}

int64_t Trial::get_batch_length(const Batch& batch) {
  const torch::Tensor& t = batch.first_tensor();
  return t.dim() == 0 ? 1 : t.size(0);
}

void Trial::save_state(torch::serialize::OutputArchive&) {}
void Trial::load_state(torch::serialize::InputArchive&) {}

namespace {

// Throws Error naming `wrapper` once the trial's constructor has returned.
void check_constructing(const detail::TrialState& state, const char* wrapper) {
  if (state.constructed) {
    throw Error(fmt::format(
        "{}: called after the trial's constructor; a checkpoint holds, and a resume restores, "
        "what the constructor wrapped: wrap it there",
        wrapper));
  }
}

}  // namespace

void TrialContext::register_model(std::shared_ptr<torch::nn::Module> model) {
  check_constructing(*state_, "wrap_model");
  if (!model) throw Error("wrap_model: the model is null");
  model->to(state_->device);
  state_->models.push_back(std::move(model));
}

void TrialContext::register_optimizer(Optimizer optimizer) {
  check_constructing(*state_, "wrap_optimizer");
  if (!optimizer) throw Error("wrap_optimizer: the optimizer is null");
  state_->optimizers.push_back(std::move(optimizer));
}

void TrialContext::register_lr_scheduler(std::shared_ptr<LRScheduler> scheduler, StepMode mode) {
  check_constructing(*state_, "wrap_lr_scheduler");
  const auto& optimizers = state_->optimizers;
  const auto wrapped = std::find(optimizers.begin(), optimizers.end(), scheduler->optimizer());
  if (wrapped == optimizers.end()) {
    throw Error(
        "wrap_lr_scheduler: the scheduler's optimizer was not wrapped with "
        "wrap_optimizer; wrap the optimizer first and build the scheduler on the result");
  }
  for (const auto& other : state_->schedulers) {
    if (other.scheduler->optimizer() != scheduler->optimizer()) continue;
    throw Error(fmt::format(
        "wrap_lr_scheduler: optimizer {} already has a scheduler: each would overwrite the rates "
        "the other wrote, and a resumed run would train at other rates than an uninterrupted "
        "one; give each optimizer one schedule (lr::LinearWarmup puts a warm-up before another)",
        wrapped - optimizers.begin()));
  }
  scheduler->set_step_count(scheduler->step_count());  // the rates of its current step
  state_->schedulers.push_back({std::move(scheduler), mode});
}

void TrialContext::register_torch_lr_scheduler(std::shared_ptr<torch::optim::LRScheduler> scheduler,
                                               StepMode mode) {
  if (!scheduler) throw Error("wrap_lr_scheduler: the scheduler is null");
  Optimizer optimizer = train::optimizer_of(*scheduler, state_->optimizers);
  if (!optimizer) {
    throw Error(
        "wrap_lr_scheduler: the LibTorch scheduler's optimizer was not wrapped with "
        "wrap_optimizer; wrap the optimizer first and build the scheduler on *the result");
  }
  register_lr_scheduler(
      std::make_shared<train::TorchLRScheduler>(std::move(optimizer), std::move(scheduler)), mode);
}

void TrialContext::register_reducer(const std::string& name,
                                    std::shared_ptr<MetricReducer> reducer) {
  check_constructing(*state_, "wrap_reducer");
  if (name.empty()) throw Error("wrap_reducer: the metric name is empty");
  if (!reducer) throw Error(fmt::format("wrap_reducer: reducer '{}' is null", name));
  if (!state_->reducers.emplace(name, std::move(reducer)).second) {
    throw Error(fmt::format("wrap_reducer: a reducer named '{}' is already registered", name));
  }
}

void TrialContext::backward(const torch::Tensor& loss) {
  const profile::ScopedPhase timing(state_->profiler, profile::Phase::kBackward);
  dist::GradientSync* sync = nullptr;
  if (state_->dist.size() > 1 && state_->optimizers.size() == 1 &&
      detail::is_update_batch(*state_)) {
    sync = &detail::gradient_sync(*state_, state_->optimizers.front());
    sync->open_window();
  }
  const AutocastRegion outside_autocast = autocast(false);
  torch::Tensor scaled = state_->scaler ? state_->scaler->scale(loss) : loss;
  const int64_t k = state_->config->optimizations.aggregation_frequency;
  if (k > 1 && state_->config->optimizations.average_aggregated_gradients) {
    scaled = scaled / static_cast<double>(k);
  }
  scaled.backward();
  if (sync) {
    const profile::ScopedPhase waiting(state_->profiler, profile::Phase::kGradientSync);
    sync->finish();
  }
}

void TrialContext::step_optimizer(const Optimizer& optimizer) {
  detail::step_optimizer(*state_, optimizer, state_->config->optimizations.gradient_clipping);
}

void TrialContext::step_optimizer(const Optimizer& optimizer, const GradientClipping& clipping) {
  train::check_clipping(clipping);
  detail::step_optimizer(*state_, optimizer, clipping);
}

MixedPrecision TrialContext::mixed_precision() const {
  return state_->config->optimizations.mixed_precision;
}

AutocastRegion TrialContext::autocast(bool enabled) const {
  const MixedPrecision precision = mixed_precision();
  return AutocastRegion(precision != MixedPrecision::kNone, state_->device.type(), enabled,
                        precision == MixedPrecision::kFp16 ? torch::kHalf : torch::kBFloat16);
}

AutocastRegion::AutocastRegion(bool active, torch::DeviceType device, bool enabled,
                               c10::ScalarType dtype)
    : active_(active), enabled_(enabled), device_(device) {
  if (!active_) return;
  const train::AutocastState was = train::autocast_state(device_);
  was_enabled_ = was.enabled;
  was_dtype_ = was.dtype;
  if (enabled) train::enter_autocast();
  train::set_autocast_state(device_, {enabled, dtype});
}

AutocastRegion::~AutocastRegion() {
  if (!active_) return;
  train::set_autocast_state(device_, {was_enabled_, was_dtype_});
  if (enabled_) train::leave_autocast();
}

void TrialContext::set_stop_requested(const std::string& reason) {
  if (const auto bad = util::first_invalid_utf8(reason)) {
    throw TrainingError(fmt::format(
        "set_stop_requested: the reason is not UTF-8 text (byte 0x{:02X} at offset {}); it goes "
        "into metrics.jsonl and the log",
        static_cast<unsigned char>(reason[*bad]), *bad));
  }
  state_->stop_requested = true;
  state_->stop_reason = reason.empty() ? "the trial requested a stop" : reason;
}

bool TrialContext::stop_requested() const { return state_->stop_requested; }

bool TrialContext::optimizer_stepped(const Optimizer& optimizer) const {
  return state_->steps.stepped_this_batch(optimizer.get());
}

const nlohmann::json& TrialContext::hparam_value(const std::string& name) const {
  auto it = state_->hparams.find(name);
  if (it == state_->hparams.end()) {
    std::string names;
    for (const auto& [k, v] : state_->hparams.items()) names += (names.empty() ? "" : ", ") + k;
    throw ConfigError(
        fmt::format("hyperparameter '{}' is not in the experiment file's "
                    "hyperparameters (it has: {})",
                    name, names));
  }
  return *it;
}

const nlohmann::json* TrialContext::find_hparam(const std::string& name) const {
  auto it = state_->hparams.find(name);
  return it == state_->hparams.end() ? nullptr : &*it;
}

const nlohmann::json& TrialContext::hparams() const { return state_->hparams; }

int64_t TrialContext::global_batch_size() const { return state_->config->global_batch_size(); }

int64_t TrialContext::per_slot_batch_size() const {
  return state_->config->global_batch_size() / state_->slots;
}

torch::Device TrialContext::device() const { return state_->device; }

Batch TrialContext::to_device(const Batch& batch) const { return batch.to(state_->device); }

bool TrialContext::is_epoch_start() const { return state_->batch_idx % state_->epoch_len == 0; }

bool TrialContext::is_epoch_end() const {
  if (state_->training_batch) return (state_->batch_idx + 1) % state_->epoch_len == 0;
  return state_->batch_idx > 0 && state_->batch_idx % state_->epoch_len == 0;
}

int64_t TrialContext::current_train_batch() const { return state_->batch_idx; }

int64_t TrialContext::current_train_epoch() const { return state_->batch_idx / state_->epoch_len; }

const DistributedContext& TrialContext::distributed() const { return state_->dist; }

const ExperimentConfig& TrialContext::experiment_config() const { return *state_->config; }

const nlohmann::json& TrialContext::data_config() const { return state_->config->data; }

const nlohmann::json* TrialContext::find_data(const std::string& key) const {
  const nlohmann::json& data = data_config();
  if (!data.is_object()) return nullptr;
  const auto it = data.find(key);
  return it == data.end() ? nullptr : &*it;
}

std::string TrialContext::data_place(const std::string& key) const {
  return config::key_place(*state_->config, "data." + key);
}

const nlohmann::json& TrialContext::data_value(const std::string& key) const {
  if (const nlohmann::json* value = find_data(key)) return *value;
  std::string keys;
  for (const auto& [k, v] : data_config().items()) keys += (keys.empty() ? "data." : ", data.") + k;
  // Placed at the block, which lacks it.
  throw ConfigError(
      fmt::format("{}: data.{}: the trial reads it, and the experiment file's data block {}",
                  config::key_place(*state_->config, "data"), key,
                  keys.empty() ? "is empty or absent" : "has " + keys));
}

void TrialContext::check_data_keys(const std::vector<std::string>& known) const {
  const nlohmann::json& data = data_config();
  if (!data.is_object()) return;
  for (const auto& [key, value] : data.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "data." : ", data.") + k;
    throw ConfigError(fmt::format("{}: data.{}: not a key this trial reads{}; it reads {}",
                                  config::key_place(*state_->config, "data." + key), key,
                                  config::did_you_mean(key, known), list.empty() ? "none" : list));
  }
}

uint64_t TrialContext::trial_seed() const { return state_->trial_seed; }

}  // namespace crucible
