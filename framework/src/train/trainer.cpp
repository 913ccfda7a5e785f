#include <crucible/trainer.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include <crucible/errors.h>
#include <crucible/trial_context.h>

#include "checkpoint/checkpoint.h"
#include "data/shuffle.h"
#include "metrics/reducer.h"
#include "metrics/sinks.h"
#include "train/run_dir.h"
#include "train/schedule.h"
#include "train/trial_state.h"
#include "util/logger.h"

namespace crucible {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Runs `fn`, turning what a trial method throws into an error naming the method; `what()` is
// called only then, so naming costs nothing per batch.
template <class Name, class Fn>
auto call_trial(Name&& what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    throw Error(std::string(what()) + ": " + e.what(), e.exit_code());
  } catch (const std::exception& e) {
    std::string msg = e.what();
    // LibTorch appends a C++ stack trace after the first line; users need only the message.
    const auto cut = msg.find("\nException raised from");
    throw TrainingError(std::string(what()) + " threw: " + msg.substr(0, cut));
  }
}

auto named(const char* name) {
  return [name] { return name; };
}

// One fit of one trial: owns the trial, its loaders and the run's outputs.
class FitLoop {
 public:
  FitLoop(const ExperimentConfig& config, const TrialFactory& factory, const FitOptions& options)
      : config_(config), factory_(factory), options_(options) {}

  FitResult run() {
    set_up();
    FitResult result;
    result.run_dir = run_.path;
    if (options_.test_mode()) {
      test_mode();
    } else {
      train();
    }
    result.batches_trained = batches_;
    result.last_validation = last_validation_;
    result.last_checkpoint = last_checkpoint_;
    logger_.info(fmt::format("done: {} batches; run directory {}", batches_, run_.path));
    return result;
  }

 private:
  void set_up() {
    if (config_.searcher.name != "single") {
      throw ConfigError(
          fmt::format("{}: searcher.name: '{}' is not available in this release; use 'single'",
                      config_.source_path, config_.searcher.name));
    }
    if (config_.resources.slots_per_trial != 1) {
      throw ConfigError(fmt::format(
          "{}: resources.slots_per_trial: {} slots need distributed training, which this "
          "release does not have yet; use 1",
          config_.source_path, config_.resources.slots_per_trial));
    }
    factory_.check_evaluation_methods();
    if (!options_.resume_dir().empty() && !options_.output_dir().empty()) {
      throw UsageError(
          "FitOptions: resume_dir and output_dir are exclusive; a resumed run writes "
          "into its own directory");
    }
    state_.config = &config_;
    state_.hparams = config_.constant_hyperparameters();
    state_.trial_seed = data::mix64(config_.reproducibility.experiment_seed);
    state_.device =
        torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);

    run_ = options_.resume_dir().empty() ? train::create_run_dir(config_, options_.output_dir())
                                         : train::open_run_dir(options_.resume_dir());
    logger_.open(run_.log_file(), options_.console());
    logger_.info(fmt::format("{} run {}: trial {} on {}",
                             options_.resume_dir().empty() ? "new" : "resuming", run_.path,
                             config_.entrypoint, state_.device.str()));

    torch::manual_seed(state_.trial_seed);
    context_ = std::make_unique<TrialContext>(&state_);
    trial_ = create_trial();
    train_loader_ = call_trial(named("build_training_data_loader"),
                               [&] { return trial_->build_training_data_loader(); });
    if (!train_loader_.dataset()) {
      throw TrainingError("build_training_data_loader returned an empty DataLoader");
    }
    if (train_loader_.options().seed() == 0) train_loader_.set_seed(state_.trial_seed);
    schedule_ = train::Schedule::make(config_, train_loader_.batches_per_epoch());
    state_.epoch_len = schedule_.epoch_len;
    max_batches_ = schedule_.to_batches(config_.max_length);
    contents_ = {state_.models, state_.optimizers, {}, trial_.get()};
    for (const auto& s : state_.schedulers) contents_.schedulers.push_back(s.scheduler);

    if (!options_.resume_dir().empty()) restore_latest();
    writer_ = std::make_unique<metrics::MetricsWriter>(run_.metrics_file(), &logger_);
  }

  std::unique_ptr<Trial> create_trial() {
    try {
      return factory_.create(*context_);
    } catch (const Error& e) {
      throw Error(fmt::format("trial {}: constructor failed: {}", factory_.name, e.what()),
                  e.exit_code());
    } catch (const std::exception& e) {
      std::string msg = e.what();
      throw PluginError(fmt::format("trial {}: constructor threw: {}", factory_.name,
                                    msg.substr(0, msg.find("\nException raised from"))));
    }
  }

  void restore_latest() {
    const auto all = checkpoint::list(run_.path);
    if (all.empty()) {
      throw UsageError(
          fmt::format("--resume {}: the run has no checkpoint to continue from", run_.path));
    }
    const nlohmann::json meta = checkpoint::load(all.back(), contents_);
    batches_ = meta.at("batches").get<int64_t>();
    last_validation_ = meta.value("validation", nlohmann::json::object());
    last_validated_at_ = meta.value("validated_at", int64_t{-1});
    last_checkpointed_at_ = batches_;
    last_checkpoint_ = all.back();
    metrics::truncate_metrics_file(run_.metrics_file(), batches_);
    const int64_t bpe = train_loader_.batches_per_epoch();
    train_loader_.seek({batches_ / bpe, batches_ % bpe});
    logger_.info(fmt::format("continuing from {} at batch {}", all.back(), batches_));
  }

  metrics::Progress progress() const {
    return {batches_, schedule_.records(batches_), schedule_.epochs(batches_)};
  }

  // Trains batch number batches_ and advances the counters.
  void train_one() {
    state_.batch_idx = batches_;
    state_.stepped_this_batch.clear();
    const int64_t epoch_idx = schedule_.epoch_of(batches_);
    Batch batch = call_trial(named("training data loader"), [&] { return train_loader_.next(); });
    batch = batch.to(state_.device);
    Metrics m = call_trial([&] { return fmt::format("train_batch (batch {})", batches_); },
                           [&] { return trial_->train_batch(batch, epoch_idx, batches_); });
    training_.add(m, batches_);
    for (auto& s : state_.schedulers) {
      if (s.mode == StepMode::EveryBatch &&
          state_.stepped_this_batch.count(s.scheduler->optimizer().get())) {
        s.scheduler->step();
      }
    }
    ++batches_;
    if (batches_ % schedule_.epoch_len == 0) {
      for (auto& s : state_.schedulers) {
        if (s.mode == StepMode::EveryEpoch &&
            state_.stepped_this_epoch.count(s.scheduler->optimizer().get())) {
          s.scheduler->step();
        }
      }
      state_.stepped_this_epoch.clear();
    }
  }

  void report_training() {
    if (training_.empty()) return;
    const int64_t n = training_.batches();
    const metrics::Values values = training_.flush();
    const double elapsed = seconds_since(report_started_);
    report_started_ = Clock::now();
    writer_->write("training", progress(), values,
                   fmt::format("({:.1f} batches/s)", static_cast<double>(n) / elapsed));
    for (const auto& [name, v] : values) {
      if (!std::isfinite(v)) {
        throw TrainingError(fmt::format(
            "training metric '{}' is {} over batches {}..{}; stopping. {}", name, v, batches_ - n,
            batches_ - 1,
            last_checkpoint_.empty() ? "No checkpoint was written yet."
                                     : "The last good checkpoint is " + last_checkpoint_));
      }
    }
  }

  void validate(int64_t max_batches = -1) {
    report_training();
    const auto started = Clock::now();
    DataLoader loader = call_trial(named("build_validation_data_loader"),
                                   [&] { return trial_->build_validation_data_loader(); });
    if (!loader.dataset()) {
      throw TrainingError("build_validation_data_loader returned an empty DataLoader");
    }
    for (auto& m : state_.models) m->eval();
    metrics::Values values;
    {
      torch::NoGradGuard no_grad;
      if (factory_.overrides_evaluate_full_dataset) {
        Metrics m = call_trial(named("evaluate_full_dataset"),
                               [&] { return trial_->evaluate_full_dataset(loader); });
        values = metrics::to_values(m, "evaluate_full_dataset");
      } else {
        metrics::ValidationAccumulator acc(trial_->evaluation_reducer());
        int64_t idx = 0;
        for (Batch& raw : loader) {
          if (max_batches >= 0 && idx >= max_batches) break;
          Batch batch = raw.to(state_.device);
          Metrics m =
              call_trial([&] { return fmt::format("evaluate_batch (validation batch {})", idx); },
                         [&] { return trial_->evaluate_batch(batch, idx); });
          acc.add(m, trial_->get_batch_length(batch), idx);
          ++idx;
        }
        values = acc.result();
      }
    }
    for (auto& m : state_.models) m->train();
    metrics::Values prefixed;
    for (const auto& [k, v] : values) {
      prefixed[k.rfind("validation_", 0) == 0 ? k : "validation_" + k] = v;
    }
    writer_->write("validation", progress(), prefixed,
                   fmt::format("({:.1f}s)", seconds_since(started)));
    last_validation_ = prefixed;
    last_validated_at_ = batches_;
    report_started_ = Clock::now();
  }

  void save_checkpoint() {
    report_training();
    const std::string dir =
        (std::filesystem::path(run_.checkpoints()) / checkpoint::directory_name(batches_)).string();
    nlohmann::json meta = {
        {"crucible_version", CRUCIBLE_VERSION_STRING},
        {"libtorch_version", TORCH_VERSION},
        {"trial_class", factory_.name},
        {"entrypoint", config_.entrypoint},
        {"hyperparameters", state_.hparams},
        {"config", to_yaml(config_)},
        {"batches", batches_},
        {"records", schedule_.records(batches_)},
        {"epochs", schedule_.epochs(batches_)},
        {"data_position",
         {{"epoch", train_loader_.position().epoch}, {"batch", train_loader_.position().batch}}},
        {"validation", last_validation_},
        {"validated_at", last_validated_at_},
    };
    const auto started = Clock::now();
    checkpoint::save(dir, contents_, meta);
    last_checkpoint_ = dir;
    last_checkpointed_at_ = batches_;
    logger_.info(fmt::format("[checkpoint] batch {:>7}  {} ({:.2f}s)", batches_, dir,
                             seconds_since(started)));
    report_started_ = Clock::now();
  }

  void train() {
    report_started_ = Clock::now();
    if (config_.perform_initial_validation && batches_ == 0 && last_validated_at_ != 0) {
      validate();
    }
    while (batches_ < max_batches_) {
      train_one();
      if (batches_ % config_.scheduling_unit == 0) report_training();
      if (schedule_.fires(config_.min_validation_period, batches_)) validate();
      if (schedule_.fires(config_.min_checkpoint_period, batches_) &&
          config_.checkpoint_policy != CheckpointPolicy::kNone) {
        save_checkpoint();
      }
    }
    report_training();
    if (last_validated_at_ != batches_) validate();
    if (last_checkpointed_at_ != batches_ && config_.checkpoint_policy != CheckpointPolicy::kNone) {
      save_checkpoint();
    }
  }

  // One training batch, one validation batch, a checkpoint saved and restored.
  void test_mode() {
    logger_.info("test mode: 1 training batch, 1 validation batch, checkpoint round trip");
    report_started_ = Clock::now();
    train_one();
    report_training();
    validate(1);
    save_checkpoint();
    std::vector<torch::Tensor> before;
    for (const auto& m : state_.models) {
      for (const auto& p : m->parameters()) before.push_back(p.detach().clone());
      for (auto& p : m->parameters()) {
        torch::NoGradGuard g;
        p.add_(1.0);
      }
    }
    const nlohmann::json meta = checkpoint::load(last_checkpoint_, contents_);
    size_t i = 0;
    for (const auto& m : state_.models) {
      for (const auto& p : m->parameters()) {
        if (!torch::equal(p.detach(), before[i++])) {
          throw TrainingError("test mode: a parameter of model differs after loading checkpoint " +
                              last_checkpoint_);
        }
      }
    }
    if (meta.at("batches").get<int64_t>() != batches_) {
      throw TrainingError("test mode: checkpoint " + last_checkpoint_ + " restored wrong counters");
    }
    logger_.info("test mode: checkpoint round trip OK");
  }

  const ExperimentConfig& config_;
  const TrialFactory& factory_;
  const FitOptions& options_;

  train::RunDir run_;
  util::Logger logger_;
  std::unique_ptr<metrics::MetricsWriter> writer_;
  detail::TrialState state_;
  std::unique_ptr<TrialContext> context_;
  std::unique_ptr<Trial> trial_;
  DataLoader train_loader_;
  train::Schedule schedule_;
  checkpoint::Contents contents_;
  metrics::TrainingAccumulator training_;

  int64_t batches_ = 0;
  int64_t max_batches_ = 0;
  int64_t last_validated_at_ = -1;
  int64_t last_checkpointed_at_ = -1;
  nlohmann::json last_validation_ = nlohmann::json::object();
  std::string last_checkpoint_;
  Clock::time_point report_started_;
};

}  // namespace

Trainer::Trainer(ExperimentConfig config, TrialFactory factory)
    : config_(std::move(config)), factory_(std::move(factory)) {}

FitResult Trainer::fit(const FitOptions& options) {
  return FitLoop(config_, factory_, options).run();
}

}  // namespace crucible
