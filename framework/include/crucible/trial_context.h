#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <crucible/batch.h>
#include <crucible/config.h>
#include <crucible/distributed.h>
#include <crucible/errors.h>
#include <crucible/json_value.h>
#include <crucible/metrics.h>
#include <crucible/optim.h>

namespace crucible {

namespace detail {
struct TrialState;
struct TrialContextAccess;
}  // namespace detail

// Autocast switched on or off for the trial's device, with its mixed-precision dtype, until the
// object is destroyed; then the previous state returns. Made by TrialContext::autocast().
class AutocastRegion {
 public:
  AutocastRegion(const AutocastRegion&) = delete;
  AutocastRegion& operator=(const AutocastRegion&) = delete;
  ~AutocastRegion();

 private:
  friend class TrialContext;
  // Does nothing when `active` is false.
  AutocastRegion(bool active, torch::DeviceType device, bool enabled, c10::ScalarType dtype);

  bool active_;
  bool enabled_;  // this region's state, and whether it entered a level of autocast nesting
  torch::DeviceType device_;
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = c10::kFloat;
};

// What a trial sees of the run: hyperparameters, the device, counters, and the wrappers through
// which Crucible learns which models, optimizers and schedulers to checkpoint, step and sync.
// Owned by the trainer; valid for the trial's whole life. The wrap_ methods belong in the trial's
// constructor: a checkpoint holds, and a resume restores, what it wrapped, and once it has
// returned they throw Error.
class TrialContext {
 public:
  // Moves `model` to device() and registers it for checkpointing. Returns the same holder.
  template <class ModuleHolder>
  ModuleHolder wrap_model(ModuleHolder model) {
    register_model(module_ptr(model));
    return model;
  }

  // Takes ownership of an optimizer built over wrapped models' parameters and registers it. A
  // resumed run restores each optimizer's state into the one the trial's constructor built, which
  // must then have the parameter groups, with as many parameters each, that it had at the
  // checkpoint: a group added during training cannot be restored (give a layer that trains later
  // its group from the start, with requires_grad false until then).
  template <class O>
  Optimizer wrap_optimizer(O optimizer) {
    static_assert(std::is_base_of_v<torch::optim::Optimizer, O>,
                  "wrap_optimizer takes a torch::optim optimizer");
    auto owned = std::make_shared<O>(std::move(optimizer));
    register_optimizer(owned);
    return owned;
  }
  template <class O>
  Optimizer wrap_optimizer(std::shared_ptr<O> optimizer) {
    register_optimizer(optimizer);
    return optimizer;
  }

  // Takes ownership of a scheduler and steps it per `mode`. Returns it for kManual stepping and
  // inspection. Its optimizer must have been wrapped (for a LibTorch scheduler: built on
  // *optimizer, the wrapped one) and have no scheduler yet (each writes its rates over the
  // other's; lr::LinearWarmup combines a warm-up with another); throws Error otherwise. S is a
  // crucible::LRScheduler (crucible::lr::...) or a torch::optim::LRScheduler subclass
  // (torch::optim::StepLR, or one of the trial's own): Crucible calls its step() per `mode`, and a
  // checkpoint keeps its step count and its optimizer's rates. LibTorch 2.x's
  // torch::optim::ReduceLROnPlateauScheduler is refused at compile time: it keeps its state
  // private, so no checkpoint could restore it (crucible::lr::ReduceLROnPlateau does the same).
  template <class S>
  std::shared_ptr<S> wrap_lr_scheduler(S scheduler, StepMode mode) {
    static_assert(
        std::is_base_of_v<LRScheduler, S> || std::is_base_of_v<torch::optim::LRScheduler, S>,
        "wrap_lr_scheduler takes a crucible::LRScheduler or a torch::optim::LRScheduler "
        "subclass. torch::optim::ReduceLROnPlateauScheduler keeps its state private, so "
        "a checkpoint could not restore it: use crucible::lr::ReduceLROnPlateau");
    auto owned = std::make_shared<S>(std::move(scheduler));
    if constexpr (std::is_base_of_v<LRScheduler, S>) {
      register_lr_scheduler(owned, mode);
    } else {
      register_torch_lr_scheduler(owned, mode);
    }
    return owned;
  }

  // Registers `reducer` as the validation metric `name` (MetricReducer says when Crucible calls
  // it). Returns it, for the trial to feed from evaluate_batch. Throws Error for an empty name or
  // one already registered.
  template <class R>
  std::shared_ptr<R> wrap_reducer(const std::string& name, std::shared_ptr<R> reducer) {
    static_assert(std::is_base_of_v<MetricReducer, R>, "wrap_reducer takes a MetricReducer");
    register_reducer(name, reducer);
    return reducer;
  }

  // loss.backward() (outside autocast), multiplied by the gradient scaler's scale under fp16
  // mixed precision, divided by aggregation_frequency when gradients are averaged over an
  // accumulation window. In a distributed run whose trial wraps one optimizer, on a batch that
  // ends an accumulation window, gradients are all-reduced in buckets while backward runs, and
  // when it returns they are the mean across ranks (gradient clipping may follow). The other
  // batches communicate nothing.
  void backward(const torch::Tensor& loss);
  // Steps `optimizer` and clears its gradients, on batches that end an accumulation window
  // (every batch when aggregation_frequency is 1); does nothing on the others. A parameter that
  // the next window gives no gradient then has none, as LibTorch 2.x's zero_grad() leaves it, so
  // the optimizer skips it (momentum and weight decay do not move it); in a distributed run, one
  // that no rank gives a gradient. There the gradients are zeroed in place rather than set to
  // none (they may be views into the gradient buckets): within the window p.grad() is zeros, the
  // zeros count as no gradient until backward passes the parameter one or the trial assigns
  // another tensor (not when it writes into them in place), and the averaging sets the gradient
  // of a parameter no rank had one for to none. In a distributed run it first averages
  // across ranks the gradients of the optimizer's parameters that backward() did not (several
  // optimizers, or gradients from a plain loss.backward()). Then, in this order: under fp16 the
  // gradient scaler unscales them; gradients holding inf or NaN skip the step (always under fp16;
  // with optimizations.non_finite: skip, at the cost of one host sync);
  // optimizations.gradient_clipping clips them and their pre-clip norm becomes the training metric
  // grad_norm (grad_norm_<i> for the i-th wrapped optimizer, i > 0). A skipped step is not an
  // optimizer step: it is not clipped and reports no grad_norm (so a scaler's overflow is not a
  // non-finite metric), no scheduler and no step counter advances, and it is counted in the
  // training metric skipped_steps.
  // Throws Error for an optimizer that was not wrapped (no checkpoint would hold its state).
  void step_optimizer(const Optimizer& optimizer);
  // As step_optimizer(optimizer), clipping as `clipping` says instead of the experiment file.
  // Throws crucible::Error when `clipping` sets both max_norm and max_value, holds a negative or
  // NaN bound, or a norm_type below 1.
  void step_optimizer(const Optimizer& optimizer, const GradientClipping& clipping);
  // Whether `optimizer` stepped in the batch being trained: inside train_batch once its
  // step_optimizer stepped, and in the callbacks' on_training_batch_end. False on a batch inside
  // an accumulation window, for a step skipped (fp16's scaler or optimizations.non_finite), and
  // before the batch's step (on_training_batch_start, on_training_epoch_start). Between batches
  // (validations, checkpoints) it answers for the last batch this process trained; false before
  // the first (a resumed run's too).
  bool optimizer_stepped(const Optimizer& optimizer) const;

  // optimizations.mixed_precision. Crucible runs train_batch, evaluate_batch,
  // evaluate_full_dataset and predict_batch under autocast when it is not kNone.
  MixedPrecision mixed_precision() const;
  // Autocast on (enabled) or off for a region of the trial's code, on device(), with the
  // mixed-precision dtype. Does nothing under MixedPrecision::kNone.
  [[nodiscard]] AutocastRegion autocast(bool enabled) const;

  // Asks the trainer to end training after the batch being trained (or the validation under
  // way), as early stopping does: a final validation and checkpoint, exit 0, and `reason` (or
  // "the trial requested a stop") in the log and metrics.jsonl. In a distributed run the ranks
  // agree on it as on a stop signal: training stops one batch later, when any rank asked.
  void set_stop_requested(const std::string& reason = "");
  bool stop_requested() const;

  // The hyperparameter `name` as T (bool, integers, floats, std::string, std::vector of those,
  // nlohmann::json). Throws ConfigError naming the hyperparameter when it is missing or has
  // another type.
  template <class T>
  T hparam(const std::string& name) const {
    return detail::json_as<T>(hparam_value(name), "hyperparameter '" + name + "'");
  }
  // As hparam<T>(name), but `default_value` when the experiment file has no hyperparameter
  // `name`. One that is present with another type still throws ConfigError naming it.
  template <class T>
  T hparam(const std::string& name, const T& default_value) const {
    const nlohmann::json* value = find_hparam(name);
    return value ? detail::json_as<T>(*value, "hyperparameter '" + name + "'") : default_value;
  }
  // hparam("act", "relu"): a string default gives a std::string.
  std::string hparam(const std::string& name, const char* default_value) const {
    return hparam<std::string>(name, std::string(default_value));
  }
  // All hyperparameters of this trial.
  const nlohmann::json& hparams() const;

  int64_t global_batch_size() const;
  // Batch size each process trains on (global_batch_size / slots).
  int64_t per_slot_batch_size() const;

  torch::Device device() const;
  Batch to_device(const Batch& batch) const;

  // Inside train_batch (and the training epoch and batch callbacks around it): whether the batch
  // being trained is the first / last of its epoch. Everywhere else: whether the next batch to
  // train starts an epoch (the batches trained so far are a whole number of epochs, none included)
  // / whether the last batch trained ended one (a whole, nonzero number of epochs), so the
  // validation that follows an epoch's last batch reads both true.
  bool is_epoch_start() const;
  bool is_epoch_end() const;
  // The training position. Inside train_batch (and the training epoch and batch callbacks around
  // it): the index of the batch being trained, which is the number of batches trained before it.
  // Everywhere else (evaluate_batch, evaluate_full_dataset, the validation, checkpoint and
  // training-end callbacks, predict_batch): the number of batches trained so far, so the
  // validation after 150 batches reads 150; under `trainer validate` and `trainer predict`, the
  // batches the checkpoint was trained for; 0 in the constructor of a new run (the checkpoint's
  // count once a resumed run is restored). current_train_epoch() is current_train_batch() divided
  // by the epoch length (the epoch being trained, or the number of whole epochs trained).
  int64_t current_train_batch() const;
  int64_t current_train_epoch() const;

  // The ranks of this run and collectives between them (one rank when not distributed).
  const DistributedContext& distributed() const;

  const ExperimentConfig& experiment_config() const;
  // The experiment file's `data` block.
  const nlohmann::json& data_config() const;
  // The `data` block's key `key` as T (the types hparam<T> takes). Throws ConfigError naming
  // data.<key> at its place in the experiment file when the block has no such key (listing those
  // it has) or when its value has another type.
  template <class T>
  T data(const std::string& key) const {
    return data_as<T>(data_value(key), key);
  }
  // As data<T>(key), but `default_value` when the block has no key `key`. One that is present
  // with another type still throws ConfigError naming it.
  template <class T>
  T data(const std::string& key, const T& default_value) const {
    const nlohmann::json* value = find_data(key);
    return value ? data_as<T>(*value, key) : default_value;
  }
  // data("path", "/data"): a string default gives a std::string.
  std::string data(const std::string& key, const char* default_value) const {
    return data<std::string>(key, std::string(default_value));
  }
  // Throws ConfigError naming the first key of the `data` block that is not in `known`, with the
  // nearest known one and the list, so that a misspelt key is not silently ignored for its
  // default. Call it in the trial's constructor with every key the trial reads.
  void check_data_keys(const std::vector<std::string>& known) const;
  // This trial's seed, derived from reproducibility.experiment_seed (0 when it is unset).
  uint64_t trial_seed() const;

 private:
  template <class Holder>
  static std::shared_ptr<torch::nn::Module> module_ptr(const Holder& model) {
    if constexpr (std::is_convertible_v<Holder, std::shared_ptr<torch::nn::Module>>) {
      return model;
    } else {
      return model.ptr();
    }
  }
  void register_model(std::shared_ptr<torch::nn::Module> model);
  void register_optimizer(Optimizer optimizer);
  void register_lr_scheduler(std::shared_ptr<LRScheduler> scheduler, StepMode mode);
  void register_torch_lr_scheduler(std::shared_ptr<torch::optim::LRScheduler> scheduler,
                                   StepMode mode);
  void register_reducer(const std::string& name, std::shared_ptr<MetricReducer> reducer);
  const nlohmann::json& hparam_value(const std::string& name) const;
  const nlohmann::json* find_hparam(const std::string& name) const;  // nullptr when absent
  const nlohmann::json& data_value(const std::string& key) const;
  const nlohmann::json* find_data(const std::string& key) const;  // nullptr when absent
  // `value`, the data block's `key`, as T; a ConfigError is placed in the file only when thrown
  // (finding the place reads the file).
  template <class T>
  T data_as(const nlohmann::json& value, const std::string& key) const {
    try {
      return detail::json_as<T>(value, "data." + key);
    } catch (const ConfigError& e) {
      throw ConfigError(data_place(key) + ": " + e.what());
    }
  }
  std::string data_place(const std::string& key) const;  // "<file>:<line>:<col>"

  friend struct detail::TrialContextAccess;  // the trainer builds it (train/trial_state.h)
  explicit TrialContext(detail::TrialState* state) : state_(state) {}

  detail::TrialState* state_;
};

}  // namespace crucible
