#include "train/fit_loop.h"

#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "checkpoint/checkpoint.h"
#include "config/enum_names.h"
#include "config/yaml_reader.h"
#include "distributed/backend.h"
#include "distributed/collectives.h"
#include "profile/profiler.h"
#include "train/checkpoint_path.h"
#include "train/checkpointer.h"
#include "train/reporter.h"
#include "train/run_start.h"
#include "train/schedule.h"
#include "train/session.h"
#include "train/stop_signals.h"
#include "train/stop_vote.h"
#include "train/test_mode.h"
#include "train/warm_start.h"
#include "util/blas.h"
#include "util/crash_report.h"
#include "util/file_system.h"
#include "util/logger.h"
#include "util/number_text.h"

namespace crucible::train {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// One fit of one trial: the session, its training loader, and the parts that report,
// checkpoint and agree on stopping.
class FitLoop {
 public:
  FitLoop(const ExperimentConfig& config, const TrialFactory& factory, const FitOptions& options)
      : config_(config),
        factory_(factory),
        options_(options),
        dist_(options.distributed()),
        crash_reports_(dist_.distributed() ? fmt::format("rank {}", dist_.rank()) : ""),
        reporter_(config, dist_),
        stop_vote_(dist_) {}

  FitResult run() {
    StopSignals signals(dist_.rank() == 0);
    try {
      return set_up_and_train();
    } catch (const std::exception& e) {
      record_failure(e);
      throw;
    }
  }

 private:
  FitResult set_up_and_train() {
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
    result.stop_reason = stop_reason_;
    result.batches_trained = state_.batches;
    result.last_validation = state_.last_validation;
    result.last_checkpoint = state_.last_checkpoint;
    profiler_->finish();
    const std::string profile = profiler_->summary();
    logger_.info(
        fmt::format("{}: {} batches; run directory {}{}\n{}{}", result.stopped ? "stopped" : "done",
                    state_.batches, run_.path,
                    result.stopped ? "; continue it with: trainer fit --resume " + run_.path : "",
                    reporter_.summary(state_, run_.path), profile.empty() ? "" : "\n" + profile));
    return result;
  }

  // Writes the error a fit ends with into the run's log; when the run holds no checkpoint, says
  // there and on the console how to start it again.
  void record_failure(const std::exception& e) {
    if (run_.path.empty() || !dist_.is_chief()) return;
    try {
      logger_.error(message_without_trace(e));
      if (!checkpoint::list(run_.path).empty()) return;
      // A bad config or command fails a rerun the same way: the error says what to mend.
      const auto* error = dynamic_cast<const Error*>(&e);
      if (error && error->exit_code() == kExitBadUsage) {
        logger_.warn(fmt::format(
            "{} holds no checkpoint: the run failed before its first{}", run_.path,
            options_.warm_start().empty()
                ? fmt::format(". With the config mended (`trainer fit --resume {} --set "
                              "KEY=VALUE`), it starts from the beginning",
                              run_.path)
                : ""));
        return;
      }
      // A rerun restarts this directory only when --output names it; a warm start is not
      // recorded, so only the same command (with its --warm-start) repeats it.
      const std::string again =
          !options_.output_dir().empty() ? "Rerunning the same command starts it from the beginning"
          : options_.warm_start().empty()
              ? fmt::format("`trainer fit --resume {}` starts it from the beginning", run_.path)
              : fmt::format("Rerun the command with --output {} to start it again", run_.path);
      logger_.warn(fmt::format("{} holds no checkpoint: the run failed before its first. {}",
                               run_.path, again));
    } catch (const std::exception&) {
      // The error being reported matters more than its record.
    }
  }

  // Returns true when a signal stopped training early (a trial's request sets stop_reason_).
  // A run that a trial's request or early stopping ended is not trained further.
  bool train() {
    reporter_.start_training(state_.batches);
    if (!state_.stopped.empty()) {
      stop_reason_ = state_.stopped;
      logger_.info(fmt::format("the run stopped early at batch {} ({}): nothing left to train",
                               state_.batches, state_.stopped));
      return false;
    }
    if (stop_pending_) {
      finish_early();
      return false;
    }
    if (!state_.last_checkpoint.empty() && state_.batches >= max_batches_) {
      const Length& length = config_.max_length;
      logger_.info(fmt::format(
          "the run {} its max_length ({}{}): nothing left to train. To train it longer: trainer "
          "fit --resume {} --set max_length.{}=N --allow-safe-changes",
          state_.batches == max_batches_ ? "had trained"
                                         : fmt::format("is at batch {}, past", state_.batches),
          length.str(),
          length.unit == LengthUnit::kBatches ? "" : fmt::format(", {} batches", max_batches_),
          run_.path, config::names<LengthUnit>().name(length.unit)));
    }
    if (config_.perform_initial_validation && state_.batches == 0 && state_.validated_at != 0) {
      validate();
    }
    bool checkpoint_due = false;  // at the batch just trained
    while (state_.batches < max_batches_) {
      train_one();
      if (state_.batches % config_.scheduling_unit == 0) report_training();
      checkpoint_due = false;
      if (schedule_.fires(config_.min_validation_period, state_.batches)) {
        const bool best = validate();
        checkpoint_due = config_.checkpoint_policy == CheckpointPolicy::kAll ||
                         (config_.checkpoint_policy == CheckpointPolicy::kBest && best);
      }
      checkpoint_due =
          checkpoint_due || schedule_.fires(config_.min_checkpoint_period, state_.batches);
      // A checkpoint follows every row of its batch: where a stop or the end writes rows and
      // checkpoints after this point, the checkpoint due here is that one, taken once. (Taken
      // here too, a resume from it would report those rows a second time.)
      const std::string console_lost = logger_.console_lost();
      const int why = stop_vote_.agreed(session_->state().stop_requested, !console_lost.empty());
      if (checkpoint_due && why == 0 && state_.batches < max_batches_) {
        // A request of this batch waits for the next vote (in a distributed run).
        save_checkpoint(PendingStops::kNextVote);
      }
      if (why == StopVote::kRequested) {
        stop_vote_.finish();
        finish_early();
        return false;
      }
      if (why != 0) {
        const std::string cause = why != SIGPIPE ? fmt::format("received {}", strsignal(why))
                                  : console_lost.empty()
                                      ? std::string("another rank's console was closed")
                                      : fmt::format("the console was closed ({})", console_lost);
        const std::string line = signal_stop_line(cause, state_.batches);
        // A closed console is news the user may miss: said on stderr too while it stands.
        if (why == SIGPIPE && !console_lost.empty()) {
          logger_.warn(line);
        } else {
          logger_.info(line);
        }
        save_checkpoint(stop_vote_.held_request() ? PendingStops::kAgreed
                                                  : PendingStops::kNextVote);
        return true;
      }
    }
    stop_vote_.finish();
    report_training();
    validate_and_checkpoint(checkpoint_due);
    return false;
  }

  // Validates, unless this batch is validated, and checkpoints, as training ends. When that
  // validation fails before it completes, in one process, and `owed` (the loop left a checkpoint
  // due at this batch to here), that checkpoint is taken first (without the validation, which a
  // resume then makes; best effort), so that the error loses no training. (Across ranks a rank
  // that fails is not in step with the others' collectives.)
  void validate_and_checkpoint(bool owed) {
    if (state_.validated_at != state_.batches) {
      try {
        validate();
      } catch (...) {
        if (owed && !dist_.distributed() && state_.validated_at != state_.batches) {
          try {
            save_checkpoint();
          } catch (...) {  // the first error is the one to report
          }
        }
        throw;
      }
    }
    save_checkpoint();
  }

  // Ends training before max_length at a trial's or early stopping's request: reports why, then
  // validates and checkpoints as the end of training does.
  void finish_early() {
    detail::TrialState& trial = session_->state();
    const std::string reason =
        trial.stop_reason.empty() ? "another rank's trial requested a stop" : trial.stop_reason;
    stop_reason_ = reason;
    state_.stopped = reason;
    report_training();
    logger_.info(fmt::format("stopping at batch {}: {}", state_.batches, reason));
    reporter_.report_stop(progress(), reason);
    validate_and_checkpoint(false);  // the stop's rows are written: no checkpoint without them
  }

  // Trains batch number state_.batches and advances the counters.
  void train_one() {
    detail::TrialState& trial = session_->state();
    const int64_t batch_idx = state_.batches;
    trial.batch_idx = batch_idx;
    trial.training_batch = true;
    trial.steps.begin_batch();
    profiler_->begin_batch(batch_idx);
    const int64_t epoch_idx = schedule_.epoch_of(batch_idx);
    if (batch_idx % schedule_.epoch_len == 0) {
      each_callback("on_training_epoch_start",
                    [&](Callback& c) { c.on_training_epoch_start(epoch_idx); });
    }
    each_callback("on_training_batch_start",
                  [&](Callback& c) { c.on_training_batch_start(batch_idx); });
    const auto asked = std::chrono::steady_clock::now();
    Batch batch = call_trial(
        [&] { return fmt::format("training data loader (batch {})", batch_idx); },
        [&] {
          const util::CrashScope crash_scope("in the training data loader", "batch", batch_idx);
          const profile::ScopedPhase timing(profiler_.get(), profile::Phase::kDataloaderNext);
          return train_loader_.next();
        });
    reporter_.data_took(std::chrono::steady_clock::now() - asked);
    Metrics m = call_trial(
        [&] { return fmt::format("train_batch (batch {})", batch_idx); },
        [&] {
          const util::CrashScope crash_scope("in train_batch", "batch", batch_idx);
          const profile::ScopedPhase timing(profiler_.get(), profile::Phase::kTrainBatch);
          const AutocastRegion autocast = session_->context().autocast(true);
          return session_->trial().train_batch(batch, epoch_idx, batch_idx);
        });
    if (trial.buffers) trial.buffers->run();
    add_step_results(m, batch_idx);
    detail::step_schedulers_after_batch(trial);
    each_callback("on_training_batch_end",
                  [&](Callback& c) { c.on_training_batch_end(batch_idx, m); });
    ++state_.batches;
    if (state_.batches % schedule_.epoch_len == 0) {
      detail::step_schedulers_after_epoch(trial);
      trial.steps.end_epoch();
      each_callback("on_training_epoch_end",
                    [&](Callback& c) { c.on_training_epoch_end(epoch_idx); });
    }
    trial.batch_idx = state_.batches;  // outside train_batch: the batches trained
    trial.training_batch = false;
    profiler_->end_batch();
  }

  // Reports the metrics of batch `batch_idx` with the trainer's own (grad_norm, skipped_steps),
  // updates the gradient scaler, and fails when non_finite: skip skipped too many steps in a row.
  void add_step_results(Metrics& m, int64_t batch_idx) {
    detail::TrialState& trial = session_->state();
    const auto reported_by_crucible = [&](const std::string& name, const char* what) {
      return TrainingError(fmt::format(
          "train_batch (batch {}) returned metric '{}', which Crucible reports itself ({}); "
          "rename it",
          batch_idx, name, what));
    };
    for (auto& [name, value] : trial.step_metrics) {
      if (!m.emplace(name, std::move(value)).second) {
        throw reported_by_crucible(name, "the gradient norm before clipping");
      }
    }
    trial.step_metrics.clear();
    const bool skipping = config_.optimizations.non_finite == NonFinitePolicy::kSkip;
    const bool counts_skips = skipping || trial.scaler;
    if (counts_skips && m.count("skipped_steps") != 0) {
      throw reported_by_crucible("skipped_steps",
                                 "the optimizer steps skipped for non-finite "
                                 "gradients");
    }
    reporter_.add_training(m, batch_idx);
    if (counts_skips) reporter_.add_training_count("skipped_steps", trial.skipped_steps);
    trial.skipped_steps = 0;
    if (trial.scaler && trial.scaler->pending()) trial.scaler->update();
    const int64_t in_a_row = trial.steps.consecutive_skips();
    if (skipping && !trial.scaler && in_a_row >= config_.optimizations.max_consecutive_skips) {
      throw TrainingError(fmt::format(
          "{} optimizer steps in a row had non-finite gradients, the last at batch {} (epoch {}); "
          "optimizations.max_consecutive_skips is {}; stopping. {}",
          in_a_row, batch_idx, schedule_.epoch_of(batch_idx),
          config_.optimizations.max_consecutive_skips, state_.last_good_checkpoint()));
    }
  }

  // Validates (at most `max_batches` batches when >= 0); returns whether the result is the best
  // so far.
  bool validate(int64_t max_batches = -1) {
    report_training();
    each_callback("on_validation_start", [](Callback& c) { c.on_validation_start(); });
    const auto started = std::chrono::steady_clock::now();
    const MetricValues values = session_->validate(max_batches);
    reporter_.report_validation(state_, values, seconds_since(started), progress());
    if (dist_.is_chief()) warn_non_finite(values);
    try {
      reporter_.check_early_stopping_metric(values);
    } catch (const ConfigError& e) {
      fail_keeping_training(e);
    }
    for (auto& s : session_->state().schedulers) {
      call_trial(named("LR scheduler"), [&] { s.scheduler->observe_validation(values); });
    }
    each_callback("on_validation_end", [&](Callback& c) { c.on_validation_end(values); });
    reporter_.restart_clock();
    try {
      return reporter_.record_best(state_);
    } catch (const ConfigError& e) {
      fail_keeping_training(e);
    }
  }

  // Warns of each validation metric that is NaN or infinite, which the evaluation made (training
  // fails on non-finite weights before it can checkpoint them).
  void warn_non_finite(const MetricValues& values) {
    for (const auto& [name, value] : values) {
      if (std::isfinite(value)) continue;
      logger_.warn(fmt::format(
          "validation metric '{}' is {} at batch {}, made by the validation (evaluate_batch, "
          "evaluate_full_dataset or a reducer); a NaN never ranks a checkpoint best",
          name, util::number_text(value, 6), state_.batches));
    }
  }

  // Fails with `e`, a metric the experiment file names that a validation lacks, after keeping
  // the training so far in a checkpoint, which the message names.
  [[noreturn]] void fail_keeping_training(const ConfigError& e) {
    save_checkpoint();
    throw ConfigError(fmt::format("{}; the training so far is in checkpoint {}", e.what(),
                                  state_.last_checkpoint));
  }

  // Reports the training metrics and, for a period with profiled batches, the profile.
  void report_training() {
    reporter_.report_training(state_, progress());
    const MetricValues profile = profiler_->take_period();
    if (!profile.empty()) reporter_.report_profile(progress(), profile);
  }

  // `stops`: what the checkpoint keeps of stop requests not acted on yet.
  void save_checkpoint(PendingStops stops = PendingStops::kOmit) {
    if (state_.checkpoint_current()) return;
    const auto started = std::chrono::steady_clock::now();
    // Never a checkpoint of a model whose loss already diverged, or whose weights did.
    reporter_.check_training_finite(state_);
    check_weights_finite();
    {
      const util::CrashScope crash_scope("while writing the checkpoint", "batch", state_.batches);
      checkpointer_->save(*session_, state_, progress(), train_loader_.position(),
                          reporter_.training_state(), stops);
    }
    each_callback("on_checkpoint_end",
                  [&](Callback& c) { c.on_checkpoint_end(state_.last_checkpoint); });
    reporter_.checkpoint_took(std::chrono::steady_clock::now() - started);
  }

  // Under non_finite: stop, throws TrainingError naming the first model parameter that holds a
  // NaN or an infinity: a gradient can be infinite while the loss that made it is finite, and the
  // step then leaves the weights non-finite a batch before the training metrics show it. Every
  // rank holds the same weights, so all of them throw. One host synchronisation per device.
  void check_weights_finite() const {
    if (config_.optimizations.non_finite != NonFinitePolicy::kStop) return;
    const auto& models = session_->contents().models;
    std::vector<torch::Tensor> finite;  // per device: whether all its parameters are finite
    for (const auto& model : models) {
      for (const auto& p : model->parameters()) {
        const torch::Tensor all = torch::isfinite(p).all();
        const auto same = std::find_if(finite.begin(), finite.end(), [&](const torch::Tensor& f) {
          return f.device() == all.device();
        });
        if (same == finite.end()) {
          finite.push_back(all);
        } else {
          *same = same->logical_and(all);
        }
      }
    }
    if (std::all_of(finite.begin(), finite.end(),
                    [](const torch::Tensor& f) { return f.item<bool>(); })) {
      return;
    }
    for (size_t m = 0; m < models.size(); ++m) {
      for (const auto& item : models[m]->named_parameters()) {
        if (torch::isfinite(item.value()).all().item<bool>()) continue;
        throw TrainingError(fmt::format(
            "model {} parameter '{}' holds a NaN or an infinity at batch {} (a gradient was not "
            "finite, though the loss was; optimizations.non_finite: stop); stopping without a "
            "checkpoint of it. {}",
            m, item.key(), state_.batches, state_.last_good_checkpoint()));
      }
    }
  }

  // One training batch, one validation batch, a checkpoint saved and restored.
  void test_mode() {
    state_.test_mode = true;
    logger_.info("test mode: 1 training batch, 1 validation batch, checkpoint round trip");
    reporter_.start_training(state_.batches);
    train_one();
    report_training();
    validate(1);
    save_checkpoint();
    check_checkpoint_round_trip(*session_, state_.last_checkpoint, state_.batches, dist_.rank());
    logger_.info("test mode: checkpoint round trip OK");
  }

  // Records the CPU's intra-op threads and BLAS in the log, and warns when the BLAS's own threads
  // compete with LibTorch's.
  void log_cpu_threads() {
    const util::BlasInfo blas = util::loaded_blas();
    const int threads = at::get_num_threads();
    logger_.info(fmt::format("cpu: {} intra-op thread{}; BLAS {}", threads, threads == 1 ? "" : "s",
                             util::describe(blas)));
    const std::string warning = util::blas_oversubscription_warning(blas, threads);
    if (!warning.empty()) logger_.warn(warning);
  }

  void set_up() {
    check_runnable(config_, factory_, dist_);
    // A --warm-start that names no checkpoint fails before a new run's directory is made. A run
    // continued (a requeued command) keeps its own weights and needs no source.
    const std::string& output = options_.output_dir();
    const bool continues = !options_.resume_dir().empty() ||
                           (!output.empty() && util::exists(util::join(output, "config.yaml")));
    if (!options_.warm_start().empty() && !continues) {
      checkpoint_path(options_.warm_start(), "--warm-start", [](const std::string&) {});
    }
    const RunStart start = start_run(config_, options_, logger_);
    run_ = start.run;
    run_lock_ = start.lock;
    if (dist_.is_chief()) crash_reports_.set_log_file(run_.log_file());
    crash_reports_.set_advice(
        fmt::format("continue the run with: trainer fit --resume {}", run_.path));
    const torch::Device device = dist::rank_device(dist_.local_rank());
    logger_.info(fmt::format(
        "{} run {}: trial {} on {}{}", start.resume_from.empty() ? "new" : "resuming", run_.path,
        config_.entrypoint, device.str(),
        dist_.distributed()
            ? fmt::format(", {} ranks over {}", dist_.size(),
                          detail::DistributedAccess::collectives(dist_)->backend_for(device))
            : ""));
    if (device.is_cpu() && dist_.is_chief()) log_cpu_threads();
    session_ = std::make_unique<TrialSession>(config_, factory_, dist_);
    profiler_ = std::make_unique<profile::Profiler>(
        config_.profiling, session_->state().device, dist_, run_.trace_file(),
        [this](const std::string& line) { logger_.warn(line); });
    session_->state().profiler = profiler_.get();
    // A run continued from a checkpoint has its own weights. Each rank pins the source it reads,
    // which stays though the run that wrote it still trains; the chief's is pinned before the
    // others are given it.
    PinnedCheckpoint warm;
    if (start.resume_from.empty()) {
      warm = pin_resolved([&] {
        return warm_start_checkpoint(config_, options_.warm_start(),
                                     [&](const std::string& w) { logger_.warn(w); });
      });
    }
    // Every rank takes the chief's: a source run still being written may resolve differently.
    if (dist_.distributed()) {
      const std::string chief = dist_.broadcast_object(nlohmann::json(warm.dir)).get<std::string>();
      if (chief != warm.dir) warm = pin_resolved([&] { return chief; });
    }
    if (!warm.dir.empty()) {
      checkpoint::load_weights(warm.dir, session_->contents().models);
      logger_.info("model weights from " + warm.dir);
    }
    Trial& trial = session_->trial();
    train_loader_ = build_trial_loader(
        "build_training_data_loader", [&] { return trial.build_training_data_loader(); },
        session_->state(), ShardMode::kSplitBatches);
    const int64_t global_batch = train_loader_.options().batch_size() * dist_.size();
    if (dist_.is_chief() && train_loader_.num_records() < global_batch) {
      logger_.warn(fmt::format(
          "the training set holds {} records, fewer than a global batch ({}): every batch is the "
          "whole set",
          train_loader_.num_records(), global_batch));
    }
    schedule_ = Schedule::make(config_, train_loader_.batches_per_epoch());
    session_->state().epoch_len = schedule_.epoch_len;
    max_batches_ = schedule_.to_batches(config_.max_length);
    const ProfilingConfig& profiling = config_.profiling;
    if (dist_.is_chief() && profiling.enabled && !options_.test_mode() &&
        profiling.begin_on_batch >= max_batches_) {
      logger_.warn(fmt::format(
          "{}: profiling.begin_on_batch {} is past the run's last batch (index {} of max_length): "
          "no batch is profiled",
          config::key_place(config_, "profiling.begin_on_batch"), profiling.begin_on_batch,
          max_batches_ - 1));
    }
    reporter_.set_length(schedule_.epoch_len, max_batches_);

    checkpointer_ = std::make_unique<Checkpointer>(config_, factory_, run_, dist_, logger_);
    if (dist_.is_chief()) checkpointer_->track_existing();
    if (!start.resume_from.empty()) restore(start.resume_from, start.searcher_metric_changed);
    if (dist_.is_chief()) reporter_.open(run_, &logger_);
  }

  // Continues from checkpoint `dir`: the trial's contents, the fit's state, the pending
  // training metrics and the training loader's position. With `searcher_metric_changed` (since
  // `dir` was written), the best is found anew from the run's validation rows.
  void restore(const std::string& dir, bool searcher_metric_changed) {
    const std::string loading = "while loading checkpoint " + dir;
    const util::CrashScope crash_scope(loading.c_str());
    const checkpoint::Metadata meta =
        checkpoint::load(dir, session_->contents(), dist_.rank(), session_->state().device);
    const size_t gpus = meta.cuda_devices;
    const auto seen = static_cast<size_t>(torch::cuda::device_count());
    if (gpus != seen) {
      logger_.warn(fmt::format(
          "{} was written by a process that saw {} GPU(s), this one sees {}: the GPU random "
          "generators start afresh, so the run does not continue bitwise",
          dir, gpus, seen));
    }
    state_.batches = meta.batches;
    session_->state().batch_idx = meta.batches;
    const checkpoint::TrainerState& saved = meta.trainer_state;
    state_.last_validation = saved.last_validation;
    state_.validated_at = saved.validated_at;
    state_.best_metric = saved.best_metric;
    state_.stopped = saved.stopped;
    if (!saved.stop_requests.empty()) {
      // A stop requested at the checkpoint's batch and not acted on: the run without the
      // interruption stopped there (the vote held it and a signal won) or, across ranks, stops
      // after the next batch (the next vote holds it).
      if (saved.stop_requests.size() != static_cast<size_t>(dist_.size())) {
        throw checkpoint::DamagedCheckpoint(fmt::format(
            "checkpoint {}: metadata.json holds the stop requests of {} rank(s), the run has {}",
            dir, saved.stop_requests.size(), dist_.size()));
      }
      detail::TrialState& trial = session_->state();
      const std::string& mine = saved.stop_requests[static_cast<size_t>(dist_.rank())];
      trial.stop_requested = !mine.empty();
      trial.stop_reason = mine;
      if (saved.stop_agreed || !dist_.distributed()) {
        stop_pending_ = true;
      } else {
        stop_vote_.carry_request();
      }
    }
    // Each rank's pending training metrics (one entry per rank in a distributed run).
    reporter_.restore_training(saved.training.is_array() ? saved.training.at(dist_.rank())
                                                         : saved.training);
    if (!saved.optimizer_counters.is_null()) {
      detail::TrialState& trial = session_->state();
      trial.steps.from_json(saved.optimizer_counters, trial.optimizers, meta.batches);
    }
    state_.checkpointed_at = state_.batches;
    state_.checkpoint_validated = saved.validated_at == state_.batches;
    state_.checkpoint_stopped = !saved.stopped.empty();
    state_.last_checkpoint = dir;
    if (dist_.is_chief()) {
      run_.keep_reports_until(state_.batches, [&](const std::string& w) { logger_.warn(w); });
    }
    // A searcher metric or direction changed on resume (allowed while the run held no best): the
    // best of the validations so far by the new one, as a run with it from the start has it.
    if (searcher_metric_changed) {
      nlohmann::json best;
      if (dist_.is_chief()) {
        const auto found = reporter_.best_in_rows(run_.metrics_file(), state_.batches);
        if (found) best = *found;
      }
      best = dist_.broadcast_object(best);
      state_.best_metric =
          best.is_null() ? std::nullopt : std::optional<double>(best.get<double>());
    }
    const int64_t bpe = train_loader_.batches_per_epoch();
    train_loader_.seek({state_.batches / bpe, state_.batches % bpe});
    logger_.info(fmt::format("continuing from {} at batch {}", dir, state_.batches));
  }

  // Calls `hook` (its name `name`, a string literal) of every callback, in name order; what one
  // throws names the callback.
  template <class Hook>
  void each_callback(const char* name, Hook&& hook) {
    const std::vector<std::string>& scopes = hook_scopes(name);
    size_t i = 0;
    for (const auto& entry : session_->callbacks()) {
      const std::string& where = scopes[i++];
      const util::CrashScope crash_scope(where.c_str());
      call_trial([&] { return where.substr(3); }, [&] { hook(*entry.second); });
    }
  }

  // "in callback 'NAME' HOOK" for each callback in name order, made at the hook's first call:
  // the batch hooks run every batch, and the callbacks are fixed once the trial is built.
  const std::vector<std::string>& hook_scopes(const char* hook) {
    std::vector<std::string>& scopes = hook_scopes_[hook];
    if (scopes.size() != session_->callbacks().size()) {
      scopes.clear();
      for (const auto& [callback, unused] : session_->callbacks()) {
        scopes.push_back(fmt::format("in callback '{}' {}", callback, hook));
      }
    }
    return scopes;
  }

  metrics::Progress progress() const {
    return {state_.batches, schedule_.records(state_.batches), schedule_.epochs(state_.batches)};
  }

  std::map<const char*, std::vector<std::string>> hook_scopes_;  // by hook name (a literal)
  const ExperimentConfig& config_;
  const TrialFactory& factory_;
  const FitOptions& options_;
  const DistributedContext& dist_;

  RunDir run_;
  std::shared_ptr<util::FileLock> run_lock_;  // the chief's, while it writes the run
  util::Logger logger_;
  util::CrashReports crash_reports_;
  std::unique_ptr<profile::Profiler> profiler_;  // declared first: it outlives session_'s use
  std::unique_ptr<TrialSession> session_;
  DataLoader train_loader_;
  Schedule schedule_;
  int64_t max_batches_ = 0;
  FitState state_;
  Reporter reporter_;
  StopVote stop_vote_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::string stop_reason_;
  // Resumed at a batch whose vote held a stop request (or, in one process, where a request was
  // pending): the run stops before training more.
  bool stop_pending_ = false;
};

}  // namespace

FitResult fit(const ExperimentConfig& config, const TrialFactory& factory,
              const FitOptions& options) {
  return FitLoop(config, factory, options).run();
}

}  // namespace crucible::train
