#include <crucible/trainer.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"
#include "checkpoint/retention.h"
#include "checkpoint/tensor_files.h"
#include "config/diff.h"
#include "dist/backend.h"
#include "dist/collectives.h"
#include "metrics/reducer.h"
#include "metrics/sinks.h"
#include "train/run_dir.h"
#include "train/schedule.h"
#include "train/session.h"
#include "train/stop_signals.h"
#include "util/file_system.h"
#include "util/logger.h"

namespace crucible {
namespace {

using Clock = std::chrono::steady_clock;
using train::call_trial;
using train::named;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void check_runnable(const ExperimentConfig& config, const TrialFactory& factory,
                    const DistributedContext& dist = DistributedContext()) {
  if (config.searcher.name != "single") {
    throw ConfigError(
        fmt::format("{}: searcher.name: '{}' is not available in this release; use 'single'",
                    config.source_path, config.searcher.name));
  }
  if (config.resources.slots_per_trial != dist.size()) {
    throw ConfigError(fmt::format(
        "{}: resources.slots_per_trial is {} but this process is one of {}; {}", config.source_path,
        config.resources.slots_per_trial, dist.size(),
        dist.size() == 1 ? "`trainer fit` starts the slots' processes itself (or launch them "
                           "with torchrun, mpirun or srun)"
                         : "launch as many processes as slots"));
  }
  factory.check_evaluation_methods();
}

// The config a checkpoint was written with.
ExperimentConfig checkpoint_config(const nlohmann::json& meta, const std::string& dir) {
  return parse_experiment_config(meta.value("config", ""), dir + "/metadata.json");
}

// One fit of one trial: owns the session, its training loader and the run's outputs.
class FitLoop {
 public:
  FitLoop(const ExperimentConfig& config, const TrialFactory& factory, const FitOptions& options)
      : config_(config), factory_(factory), options_(options) {}

  FitResult run() {
    train::StopSignals signals;
    set_up();
    FitResult result;
    result.run_dir = run_.path;
    each_callback("on_training_start", [](Callback& c) { c.on_training_start(); });
    if (options_.test_mode()) {
      test_mode();
    } else {
      result.stopped = train();
    }
    each_callback("on_training_end", [](Callback& c) { c.on_training_end(); });
    result.batches_trained = batches_;
    result.last_validation = last_validation_;
    result.last_checkpoint = last_checkpoint_;
    logger_.info(fmt::format("{}: {} batches; run directory {}",
                             result.stopped ? "stopped" : "done", batches_, run_.path));
    return result;
  }

 private:
  void set_up() {
    check_runnable(config_, factory_, dist_);
    const bool resuming = !options_.resume_dir().empty();
    if (resuming && !options_.output_dir().empty()) {
      throw UsageError(
          "FitOptions: resume_dir and output_dir are exclusive; a resumed run writes "
          "into its own directory");
    }
    if (resuming && !options_.warm_start().empty()) {
      throw UsageError("--warm-start starts a new run; it cannot be combined with --resume");
    }
    // The chief owns the run directory; the other ranks learn its path and read from it.
    if (chief()) {
      run_ = resuming ? train::open_run_dir(options_.resume_dir())
                      : train::create_run_dir(config_, options_.output_dir());
      logger_.open(run_.log_file(), options_.console());
    } else {
      logger_.console_warnings_only();
    }
    run_.path = dist_.broadcast_object(run_.path).get<std::string>();
    std::string resume_from;
    if (resuming) {
      if (chief()) {
        for (const auto& dir : checkpoint::remove_unfinished(run_.path)) {
          logger_.warn("removed " + dir + ", a checkpoint whose writing was cut short");
        }
        resume_from =
            checkpoint::newest_good(run_.path, [&](const std::string& w) { logger_.warn(w); });
      }
      resume_from = dist_.broadcast_object(resume_from).get<std::string>();
      accept_config_changes(resume_from);
    }
    const torch::Device device = dist::rank_device(dist_.local_rank());
    logger_.info(fmt::format("{} run {}: trial {} on {}{}", resuming ? "resuming" : "new",
                             run_.path, config_.entrypoint, device.str(),
                             dist_.distributed()
                                 ? fmt::format(", {} ranks over {}", dist_.size(),
                                               dist_.collectives()->backend_for(device))
                                 : ""));

    session_ = std::make_unique<train::TrialSession>(config_, factory_, dist_);
    if (!options_.warm_start().empty()) {
      checkpoint::load_weights(options_.warm_start(), session_->contents().models);
      logger_.info("model weights from " + options_.warm_start());
    }
    Trial& trial = session_->trial();
    train_loader_ = call_trial(named("build_training_data_loader"),
                               [&] { return trial.build_training_data_loader(); });
    if (!train_loader_.dataset()) {
      throw TrainingError("build_training_data_loader returned an empty DataLoader");
    }
    if (train_loader_.options().seed() == 0) train_loader_.set_seed(session_->state().trial_seed);
    train_loader_.shard(dist_.rank(), dist_.size(), ShardMode::kSplitBatches);
    train_loader_.set_device(session_->state().device);
    schedule_ = train::Schedule::make(config_, train_loader_.batches_per_epoch());
    session_->state().epoch_len = schedule_.epoch_len;
    max_batches_ = schedule_.to_batches(config_.max_length);

    if (chief()) {
      for (const auto& dir : checkpoint::list(run_.path)) track_checkpoint(dir);
    }
    if (resuming) restore(resume_from);
    if (chief()) writer_ = std::make_unique<metrics::MetricsWriter>(run_.metrics_file(), &logger_);
  }

  bool chief() const { return dist_.is_chief(); }

  // Writes a row into metrics.jsonl and the log (the chief's; the other ranks write nothing).
  void write_row(const char* type, const metrics::Values& values, const std::string& note) {
    if (writer_) writer_->write(type, progress(), values, note);
  }

  // Compares the config to the one the checkpoint was written with; refuses unsafe changes.
  void accept_config_changes(const std::string& dir) {
    const nlohmann::json meta = checkpoint::metadata(dir);  // restore() verifies the files
    const auto changes = config::diff(checkpoint_config(meta, dir), config_);
    if (changes.empty()) return;
    std::string list;
    bool all_safe = true;
    for (const auto& c : changes) {
      const bool safe = config::is_safe_change(c.key);
      all_safe = all_safe && safe;
      list += fmt::format("\n  {}: {} -> {}{}", c.key, c.before, c.after, safe ? "" : "  (unsafe)");
    }
    if (!all_safe || !options_.allow_safe_changes()) {
      throw UsageError(fmt::format(
          "--resume {}: the config differs from the one checkpoint {} was written with:{}\n{}",
          run_.path, dir, list,
          all_safe ? "These changes are safe; pass --allow-safe-changes to accept them."
                   : "Only lengths, periods, scheduling_unit and retention counts may change on "
                     "resume; start a new run (or --warm-start) for the others."));
    }
    if (chief()) checkpoint::replace_atomically(run_.config_file(), to_yaml(config_));
    logger_.info("accepted config changes:" + list);
  }

  void restore(const std::string& dir) {
    const nlohmann::json meta =
        checkpoint::load(dir, session_->contents(), dist_.rank(), session_->state().device);
    const size_t gpus = meta.value("cuda_devices", size_t{0});
    if (gpus != torch::cuda::device_count()) {
      logger_.warn(fmt::format(
          "{} was written by a process that saw {} GPU(s), this one sees {}: the GPU random "
          "generators start afresh, so the run does not continue bitwise",
          dir, gpus, torch::cuda::device_count()));
    }
    batches_ = meta.at("batches").get<int64_t>();
    const nlohmann::json state = meta.value("trainer_state", nlohmann::json::object());
    last_validation_ = state.value("last_validation", nlohmann::json::object());
    last_validated_at_ = state.value("validated_at", int64_t{-1});
    if (state.contains("best_metric") && !state["best_metric"].is_null()) {
      best_metric_ = state["best_metric"].get<double>();
    }
    // Each rank's pending training metrics (one entry per rank in a distributed run).
    const auto training = state.value("training", nlohmann::json::object());
    training_.restore(training.is_array() ? training.at(dist_.rank()) : training);
    if (state.contains("optimizer_counters")) {
      detail::restore_optimizer_counters(session_->state(), state["optimizer_counters"]);
    }
    last_checkpointed_at_ = batches_;
    last_checkpoint_ = dir;
    if (chief()) metrics::truncate_metrics_file(run_.metrics_file(), batches_);
    const int64_t bpe = train_loader_.batches_per_epoch();
    train_loader_.seek({batches_ / bpe, batches_ % bpe});
    logger_.info(fmt::format("continuing from {} at batch {}", dir, batches_));
  }

  // Calls `hook` of every callback, in name order; what one throws names the callback.
  template <class Hook>
  void each_callback(const char* name, Hook&& hook) {
    for (const auto& [callback_name, callback] : session_->callbacks()) {
      call_trial([&] { return fmt::format("callback '{}' {}", callback_name, name); },
                 [&] { hook(*callback); });
    }
  }

  metrics::Progress progress() const {
    return {batches_, schedule_.records(batches_), schedule_.epochs(batches_)};
  }

  // Trains batch number batches_ and advances the counters.
  void train_one() {
    detail::TrialState& state = session_->state();
    state.batch_idx = batches_;
    state.stepped_this_batch.clear();
    const int64_t epoch_idx = schedule_.epoch_of(batches_);
    if (batches_ % schedule_.epoch_len == 0) {
      each_callback("on_training_epoch_start",
                    [&](Callback& c) { c.on_training_epoch_start(epoch_idx); });
    }
    Batch batch = call_trial(named("training data loader"), [&] { return train_loader_.next(); });
    Metrics m =
        call_trial([&] { return fmt::format("train_batch (batch {})", batches_); },
                   [&] { return session_->trial().train_batch(batch, epoch_idx, batches_); });
    if (state.buffers) state.buffers->run();
    training_.add(m, batches_);
    for (auto& s : state.schedulers) {
      if (s.mode == StepMode::EveryBatch &&
          state.stepped_this_batch.count(s.scheduler->optimizer().get())) {
        s.scheduler->step();
      }
    }
    ++batches_;
    if (batches_ % schedule_.epoch_len == 0) {
      for (auto& s : state.schedulers) {
        if (s.mode == StepMode::EveryEpoch &&
            state.stepped_this_epoch.count(s.scheduler->optimizer().get())) {
          s.scheduler->step();
        }
      }
      state.stepped_this_epoch.clear();
      each_callback("on_training_epoch_end",
                    [&](Callback& c) { c.on_training_epoch_end(epoch_idx); });
    }
  }

  void report_training() {
    if (training_.empty()) return;
    const int64_t n = training_.batches();
    const metrics::Values values = metrics::average_across_ranks(dist_, training_.flush());
    const double elapsed = seconds_since(report_started_);
    report_started_ = Clock::now();
    write_row("training", values,
              fmt::format("({:.1f} batches/s)", static_cast<double>(n) / elapsed));
    check_finite(values, n);
  }

  // Throws TrainingError naming the first metric of `values` (the means of the last `n`
  // batches) that is not finite, and the last good checkpoint.
  void check_finite(const metrics::Values& values, int64_t n) const {
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

  // The searcher metric of `values`. Throws ConfigError naming the metrics present when absent.
  double searcher_metric(const metrics::Values& values) const {
    auto it = values.find(config_.searcher.metric);
    if (it == values.end()) {
      std::string names;
      for (const auto& [k, v] : values) names += (names.empty() ? "" : ", ") + k;
      throw ConfigError(
          fmt::format("{}: searcher.metric: '{}' is not among the validation metrics ({})",
                      config_.source_path, config_.searcher.metric, names));
    }
    return it->second;
  }

  bool better(double a, double b) const {
    return config_.searcher.smaller_is_better ? a < b : a > b;
  }

  // Validates; returns whether the result is the best so far.
  bool validate(int64_t max_batches = -1) {
    report_training();
    each_callback("on_validation_start", [](Callback& c) { c.on_validation_start(); });
    const auto started = Clock::now();
    const metrics::Values values = session_->validate(max_batches);
    write_row("validation", values, fmt::format("({:.1f}s)", seconds_since(started)));
    last_validation_ = values;
    last_validated_at_ = batches_;
    each_callback("on_validation_end", [&](Callback& c) { c.on_validation_end(values); });
    report_started_ = Clock::now();
    const double metric = searcher_metric(values);
    const bool best = !best_metric_ || better(metric, *best_metric_);
    if (best) best_metric_ = metric;
    return best;
  }

  void track_checkpoint(const std::string& dir) {
    std::ifstream in(dir + "/metadata.json");
    const auto meta = nlohmann::json::parse(in, nullptr, false);
    if (meta.is_discarded()) return;  // damaged: never counted, never deleted here
    checkpoint::Entry entry{dir, meta.value("batches", int64_t{0}), std::nullopt};
    const auto state = meta.value("trainer_state", nlohmann::json::object());
    const auto validation = state.value("last_validation", nlohmann::json::object());
    if (state.value("validated_at", int64_t{-1}) == entry.batches &&
        validation.contains(config_.searcher.metric)) {
      entry.metric = validation[config_.searcher.metric].get<double>();
    }
    checkpoints_.push_back(entry);
  }

  void save_checkpoint() {
    if (last_checkpointed_at_ == batches_) return;
    // Never a checkpoint of a model whose loss already diverged.
    if (!training_.empty()) {
      check_finite(metrics::average_across_ranks(dist_, training_.peek()), training_.batches());
    }
    const detail::TrialState& state = session_->state();
    const nlohmann::json optimizer_counters = detail::optimizer_counters(state);
    nlohmann::json meta = {
        {"crucible_version", CRUCIBLE_VERSION_STRING},
        {"libtorch_version", TORCH_VERSION},
        {"trial_class", factory_.name},
        {"entrypoint", config_.entrypoint},
        {"hyperparameters", state.hparams},
        {"config", to_yaml(config_)},
        {"batches", batches_},
        {"records", schedule_.records(batches_)},
        {"epochs", schedule_.epochs(batches_)},
        {"optimizer_steps", optimizer_counters["optimizer_steps"]},
        {"data_position",
         {{"epoch", train_loader_.position().epoch}, {"batch", train_loader_.position().batch}}},
        {"validation",
         last_validated_at_ == batches_ ? last_validation_ : nlohmann::json::object()},
        {"trainer_state",
         {{"training", dist_.distributed()
                           ? nlohmann::json(dist_.allgather_object(training_.state()))
                           : training_.state()},
          {"last_validation", last_validation_},
          {"validated_at", last_validated_at_},
          {"optimizer_counters", optimizer_counters},
          {"best_metric", best_metric_ ? nlohmann::json(*best_metric_) : nlohmann::json()}}},
    };
    const auto started = Clock::now();
    // Every rank's generators (CPU, and its GPU's): the chief writes them all.
    checkpoint::RankGenerators generators;
    if (dist_.distributed()) {
      generators.cpu = dist_.allgather(at::detail::getDefaultCPUGenerator().get_state());
      const torch::Device device = session_->state().device;
      if (device.is_cuda()) {
        generators.cuda = dist_.allgather(at::globalContext().defaultGenerator(device).get_state());
      }
    }
    std::string dir = run_.path + "/checkpoints/" + checkpoint::directory_name(batches_);
    if (chief()) {
      dir = checkpoint::save(run_.path, batches_, session_->contents(), meta, generators);
      checkpoints_.erase(std::remove_if(checkpoints_.begin(), checkpoints_.end(),
                                        [&](const auto& e) { return e.dir == dir; }),
                         checkpoints_.end());
      track_checkpoint(dir);
      apply_retention();
    }
    dist_.barrier();  // the checkpoint exists for every rank from here on
    last_checkpoint_ = dir;
    last_checkpointed_at_ = batches_;
    logger_.info(fmt::format("[checkpoint] batch {:>7}  {} ({:.3f}s)", batches_, dir,
                             seconds_since(started)));
    each_callback("on_checkpoint_end", [&](Callback& c) { c.on_checkpoint_end(dir); });
    report_started_ = Clock::now();
  }

  void apply_retention() {
    const auto& storage = config_.checkpoint_storage;
    for (const auto& dir :
         checkpoint::to_delete(checkpoints_, storage.save_trial_latest, storage.save_trial_best,
                               config_.searcher.smaller_is_better)) {
      try {
        util::remove_all(dir);
      } catch (const std::exception& e) {
        logger_.warn(fmt::format("cannot delete old checkpoint {}: {}", dir, e.what()));
      }
      checkpoints_.erase(std::remove_if(checkpoints_.begin(), checkpoints_.end(),
                                        [&](const auto& e) { return e.dir == dir; }),
                         checkpoints_.end());
    }
  }

  // The stop signal any rank had received after the previous batch (0: none); every rank gets
  // the same answer. The ranks' vote for this batch is started now and read after the next one,
  // so that no rank waits on it: a distributed run stops one batch after the signal.
  int agreed_stop_signal() {
    const int sig = train::StopSignals::requested();
    if (!dist_.distributed()) return sig;
    if (stop_work_) {
      dist_.collectives()->wait(stop_work_, "stop-signal allreduce");
      stop_work_.reset();
      if (const int agreed = stop_vote_.item<int>()) return agreed;
    } else {
      stop_vote_ = torch::zeros({1}, torch::kInt);
    }
    stop_vote_.fill_(sig);
    stop_work_ = dist_.collectives()->allreduce_async(stop_vote_, ReduceOp::kMax);
    return 0;
  }

  // Completes a vote still in flight, before the trainer's last collectives.
  void finish_stop_vote() {
    if (stop_work_) dist_.collectives()->wait(stop_work_, "stop-signal allreduce");
    stop_work_.reset();
  }

  // Returns true when a signal stopped training early.
  bool train() {
    report_started_ = Clock::now();
    if (config_.perform_initial_validation && batches_ == 0 && last_validated_at_ != 0) {
      validate();
    }
    while (batches_ < max_batches_) {
      train_one();
      if (batches_ % config_.scheduling_unit == 0) report_training();
      if (schedule_.fires(config_.min_validation_period, batches_)) {
        const bool best = validate();
        if (config_.checkpoint_policy == CheckpointPolicy::kAll ||
            (config_.checkpoint_policy == CheckpointPolicy::kBest && best)) {
          save_checkpoint();
        }
      }
      if (schedule_.fires(config_.min_checkpoint_period, batches_)) save_checkpoint();
      if (const int sig = agreed_stop_signal()) {
        logger_.info(fmt::format("received {}: checkpointing at batch {} and stopping",
                                 strsignal(sig), batches_));
        save_checkpoint();
        return true;
      }
    }
    finish_stop_vote();
    report_training();
    if (last_validated_at_ != batches_) validate();
    save_checkpoint();
    return false;
  }

  // One training batch, one validation batch, a checkpoint saved and restored.
  void test_mode() {
    logger_.info("test mode: 1 training batch, 1 validation batch, checkpoint round trip");
    report_started_ = Clock::now();
    train_one();
    report_training();
    validate(1);
    save_checkpoint();
    const auto& models = session_->contents().models;
    std::vector<torch::Tensor> before;
    for (const auto& m : models) {
      torch::NoGradGuard g;
      for (auto& p : m->parameters()) {
        before.push_back(p.detach().clone());
        p.add_(1.0);
      }
    }
    const nlohmann::json meta = checkpoint::load(last_checkpoint_, session_->contents(),
                                                 dist_.rank(), session_->state().device);
    size_t i = 0;
    for (const auto& m : models) {
      for (const auto& p : m->parameters()) {
        if (!torch::equal(p.detach(), before[i++])) {
          throw TrainingError("test mode: a parameter differs after loading checkpoint " +
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
  const DistributedContext& dist_ = options_.distributed();

  train::RunDir run_;
  util::Logger logger_;
  std::unique_ptr<metrics::MetricsWriter> writer_;
  std::unique_ptr<train::TrialSession> session_;
  DataLoader train_loader_;
  train::Schedule schedule_;
  metrics::TrainingAccumulator training_;
  std::vector<checkpoint::Entry> checkpoints_;

  int64_t batches_ = 0;
  int64_t max_batches_ = 0;
  torch::Tensor stop_vote_;  // this rank's stop signal, all-reduced (MAX) in the background
  c10::intrusive_ptr<c10d::Work> stop_work_;
  int64_t last_validated_at_ = -1;
  int64_t last_checkpointed_at_ = -1;
  std::optional<double> best_metric_;
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

nlohmann::json Trainer::validate(const std::string& checkpoint_dir) {
  check_runnable(config_, factory_);
  train::TrialSession session(config_, factory_);
  checkpoint::load(checkpoint_dir, session.contents());
  return session.validate();
}

int64_t Trainer::predict(const std::string& checkpoint_dir, const std::string& output_file) {
  check_runnable(config_, factory_);
  if (!factory_.overrides_predict_batch) {
    throw PluginError(fmt::format(
        "trial {} does not implement predict_batch(batch, batch_idx), which trainer predict runs",
        factory_.name));
  }
  train::TrialSession session(config_, factory_);
  checkpoint::load(checkpoint_dir, session.contents());
  Trial& trial = session.trial();
  DataLoader loader = call_trial(named("build_predict_data_loader"),
                                 [&] { return trial.build_predict_data_loader(); });
  const torch::Device device = session.state().device;
  loader.set_device(device);
  std::vector<torch::Tensor> outputs;
  for (auto& m : session.state().models) m->eval();
  {
    torch::NoGradGuard no_grad;
    int64_t idx = 0;
    for (Batch& batch : loader) {
      outputs.push_back(call_trial([&] { return fmt::format("predict_batch (batch {})", idx); },
                                   [&] { return trial.predict_batch(batch, idx); })
                            .detach()
                            .to(torch::kCPU));
      ++idx;
    }
  }
  const torch::Tensor all = torch::cat(outputs, 0);
  try {
    checkpoint::write_durably(output_file, checkpoint::torch_dict_bytes({{"predictions", all}}));
  } catch (const std::exception& e) {
    throw TrainingError(fmt::format("cannot write predictions: {}", e.what()));
  }
  return all.size(0);
}

}  // namespace crucible
