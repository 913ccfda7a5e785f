#include "train/run_start.h"

#include <algorithm>
#include <exception>
#include <functional>

#include <fmt/format.h>

#include <crucible/errors.h>

#include "checkpoint/checkpoint.h"
#include "config/diff.h"
#include "config/enum_names.h"
#include "config/yaml_reader.h"
#include "distributed/backend.h"
#include "util/file_io.h"
#include "util/file_system.h"

namespace crucible::train {

void check_runnable(const ExperimentConfig& config, const TrialFactory& factory,
                    const DistributedContext& dist) {
  if (config.searcher.name != SearcherName::kSingle) {
    throw ConfigError(
        fmt::format("{}: searcher.name: '{}' is a search, and a Trainer trains one trial; run "
                    "searches with run_experiment (experiment.h) or `trainer fit`",
                    config::key_place(config, "searcher.name"),
                    config::names<SearcherName>().name(config.searcher.name)));
  }
  if (config.resources.slots_per_trial != dist.size()) {
    throw ConfigError(fmt::format(
        "{}: resources.slots_per_trial is {} but this process is one of {}; {}",
        config::key_place(config, "resources.slots_per_trial"), config.resources.slots_per_trial,
        dist.size(),
        dist.size() == 1 ? "`trainer fit` starts the slots' processes itself (or launch them "
                           "with torchrun, mpirun or srun)"
                         : "launch as many processes as slots"));
  }
  factory.check_evaluation_methods();
  check_device_support(config, dist::rank_device(dist.local_rank()));
}

void check_device_support(const ExperimentConfig& config, const torch::Device& device) {
  if (config.optimizations.mixed_precision == MixedPrecision::kFp16 && !device.is_cuda()) {
    throw ConfigError(fmt::format(
        "{}: optimizations.mixed_precision: fp16 needs a CUDA device, and this process computes "
        "on {}; use bf16 on CPU",
        config::key_place(config, "optimizations.mixed_precision", "fp16"), device.str()));
  }
}

ExperimentConfig for_evaluation(ExperimentConfig config, int64_t slots) {
  if (config.global_batch_size() % slots != 0) {
    throw UsageError(fmt::format(
        "evaluating on {} slots: the run's hyperparameters.global_batch_size ({}) is not a "
        "multiple of {}; choose a number of slots that divides it",
        slots, config.global_batch_size(), slots));
  }
  config.resources.slots_per_trial = slots;
  return config;
}

namespace {

// Whether `key` may change when a run resumes from a checkpoint: a key `trainer keys` marks safe
// or run; when the run has no best value of its searcher metric (`has_best` false), also the
// metric and its direction (a misspelled metric fails the first validation, which keeps the
// training so far in a checkpoint to continue with the right name).
bool safe_on_resume(const std::string& key, bool has_best) {
  return config::is_safe_change(key) ||
         (!has_best && (key == "searcher.metric" || key == "searcher.smaller_is_better"));
}

std::string change_list(const std::vector<config::Change>& changes, bool has_best) {
  return config::change_list(changes,
                             [&](const std::string& key) { return safe_on_resume(key, has_best); });
}

// Throws the UsageError that refuses a resume of `run` whose config differs from `from` (a
// description of the config compared with) by `changes`, when one of them may not change on
// resume (safe_on_resume with `has_best`), or when `allow_safe` is false and there are any.
void refuse_changes(const RunDir& run, const std::string& from,
                    const std::vector<config::Change>& changes, bool has_best, bool allow_safe) {
  if (changes.empty()) return;
  if (!std::all_of(changes.begin(), changes.end(),
                   [&](const auto& c) { return safe_on_resume(c.key, has_best); })) {
    throw UsageError(fmt::format(
        "--resume {}: the config differs from {}:{}\nOnly the keys `trainer keys` marks safe or "
        "run (lengths, periods, reporting, retention, profiling) may change on resume; start a "
        "new run (or --warm-start) for the others.",
        run.path, from, change_list(changes, has_best)));
  }
  if (!allow_safe) {
    throw UsageError(
        fmt::format("--resume {}: the config differs from {}:{}\nThese changes are safe; pass "
                    "--allow-safe-changes to accept them.",
                    run.path, from, change_list(changes, has_best)));
  }
}

// The changes from run `run`'s config.yaml to `config`.
std::vector<config::Change> changes_to_run(const ExperimentConfig& config, const RunDir& run) {
  return config::diff(load_experiment_config(run.config_file()), config);
}

// Compares `config` with the one checkpoint `dir` of run `run` was written with, and with the
// run's config.yaml (the checkpoint's config plus the changes accepted since). Refuses any unsafe
// change from the checkpoint's config, and safe changes from config.yaml unless `allow_safe`: a
// change accepted once stays accepted, by a plain --resume too. The chief rewrites config.yaml
// when `config` differs from it. Returns whether the searcher metric or its direction differs
// from the checkpoint's.
bool accept_config_changes(const ExperimentConfig& config, const std::string& dir,
                           const RunDir& run, bool allow_safe, bool chief, util::Logger& logger) {
  // Loading the checkpoint verifies its files.
  const checkpoint::Metadata meta = checkpoint::metadata(dir);
  if (meta.trainer_state.test_mode) {
    throw UsageError(fmt::format(
        "{}: a --test-mode run (one training batch, validated on one batch) is not continued; "
        "start a run with `trainer fit CONFIG` (with another --output)",
        run.path));
  }
  const ExperimentConfig trained = parse_experiment_config(meta.config, dir + "/metadata.json");
  const bool has_best = meta.trainer_state.best_metric.has_value();
  const auto changes = config::diff(trained, config);
  refuse_changes(run, fmt::format("the one checkpoint {} was written with", dir), changes, has_best,
                 true);
  const auto fresh = changes_to_run(config, run);
  refuse_changes(run, "the run's " + run.config_file(), fresh, has_best, allow_safe);
  if (chief && !fresh.empty()) util::replace_atomically(run.config_file(), to_yaml(config));
  if (!fresh.empty()) logger.info("accepted config changes:" + change_list(fresh, has_best));
  if (!changes.empty() && change_list(changes, has_best) != change_list(fresh, has_best)) {
    logger.info(
        fmt::format("the config differs from checkpoint {}'s by changes accepted on "
                    "resume:{}",
                    util::file_name(dir), change_list(changes, has_best)));
  }
  return std::any_of(changes.begin(), changes.end(), [](const config::Change& c) {
    return c.key == "searcher.metric" || c.key == "searcher.smaller_is_better";
  });
}

// What `work` returns on the chief, on every rank of `dist`. When it throws on the chief, every
// rank throws at once (the chief its own error; the others an Error with its message and exit
// code) instead of the others waiting for a broadcast that never comes.
nlohmann::json chief_then_broadcast(const DistributedContext& dist,
                                    const std::function<nlohmann::json()>& work) {
  nlohmann::json sent;
  std::exception_ptr failure;
  if (dist.is_chief()) {
    try {
      sent = {{"value", work()}};
    } catch (const Error& e) {
      failure = std::current_exception();
      sent = {{"error", e.what()}, {"exit_code", e.exit_code()}};
    } catch (const std::exception& e) {
      failure = std::current_exception();
      sent = {{"error", message_without_trace(e)}, {"exit_code", kExitTrainingFailed}};
    }
  }
  const nlohmann::json got = dist.broadcast_object(sent);
  if (failure) std::rethrow_exception(failure);
  if (got.contains("error")) {
    throw Error(fmt::format("rank 0 could not open the run: {}", got["error"].get<std::string>()),
                got["exit_code"].get<int>());
  }
  return got["value"];
}

// Makes run `run`, which stopped before its first checkpoint, start again: its metrics and its
// operator trace go, and its config.yaml becomes `config`.
void restart_from_beginning(const ExperimentConfig& config, const RunDir& run,
                            util::Logger& logger) {
  logger.info(run.path +
              " has no checkpoint (it stopped before its first): training from the beginning");
  const auto changes = changes_to_run(config, run);
  if (!changes.empty()) logger.info("with config changes:" + change_list(changes, false));
  run.keep_reports_until(-1, [&](const std::string& w) { logger.warn(w); });
  util::remove(run.trace_file());
  util::replace_atomically(run.config_file(), to_yaml(config));
}

}  // namespace

void check_resume_config(const ExperimentConfig& config, const RunDir& run, bool allow_safe) {
  const std::vector<std::string> all = checkpoint::list(run.path);
  if (all.empty()) return;
  // The ranks resume from the newest good checkpoint: only when each one holds a best value is a
  // metric's change sure to be refused.
  bool has_best = true;
  for (const std::string& dir : all) {
    try {
      has_best = has_best && checkpoint::metadata(dir).trainer_state.best_metric.has_value();
    } catch (const std::exception&) {
      has_best = false;
    }
  }
  refuse_changes(run, "the run's " + run.config_file(), changes_to_run(config, run), has_best,
                 allow_safe);
}

void check_resume_options(const FitOptions& options) {
  if (options.resume_dir().empty()) return;
  if (!options.warm_start().empty()) {
    throw UsageError("--warm-start starts a new run; it cannot be combined with --resume");
  }
  if (options.test_mode()) {
    throw UsageError(
        "--test-mode checks a trial in a new run; it cannot be combined with --resume");
  }
}

RunStart start_run(const ExperimentConfig& config, const FitOptions& options,
                   util::Logger& logger) {
  const DistributedContext& dist = options.distributed();
  const bool resume_asked = !options.resume_dir().empty();
  if (resume_asked && !options.output_dir().empty()) {
    throw UsageError(
        "FitOptions: resume_dir and output_dir are exclusive; a resumed run writes "
        "into its own directory");
  }
  check_resume_options(options);
  RunStart start;
  bool resuming = resume_asked;
  // The chief owns the run directory; the other ranks learn its path and read from it.
  if (!dist.is_chief()) logger.console_warnings_only();
  const nlohmann::json opened = chief_then_broadcast(dist, [&]() -> nlohmann::json {
    const auto warn = [&](const std::string& w) { logger.warn(w); };
    // Locked before it is read: a directory given by the user. Refused before that (the lock
    // would leave a file in it): a --resume that holds no run, an --output that cannot hold one.
    const std::string& given = resume_asked ? options.resume_dir() : options.output_dir();
    if (resume_asked) {
      open_run_dir(given);
    } else if (!given.empty()) {
      check_output_dir(given);
    }
    const bool lock_first = !given.empty();
    if (lock_first) start.lock = lock_run_dir(given, warn);
    const bool rerun = !resuming && holds_run_of(config, options.output_dir());
    if (rerun && options.test_mode()) {
      throw UsageError(fmt::format(
          "--test-mode checks a trial in a new run, and --output {} holds one; give another",
          options.output_dir()));
    }
    resuming = resuming || rerun;
    start.run = resuming ? open_run_dir(rerun ? options.output_dir() : options.resume_dir())
                         : create_run_dir(config, options.output_dir());
    if (!lock_first) start.lock = lock_run_dir(start.run.path, warn);
    logger.open(start.run.log_file(), options.console());
    if (rerun) logger.info(start.run.path + " holds a run of this config: continuing it");
    return {{"path", start.run.path}, {"resuming", resuming}};
  });
  start.run.path = opened["path"].get<std::string>();
  if (!opened["resuming"].get<bool>()) return start;
  start.resume_from =
      chief_then_broadcast(dist, [&]() -> nlohmann::json {
        const auto warn = [&](const std::string& w) { logger.warn(w); };
        for (const auto& dir : checkpoint::remove_unfinished(start.run.path, warn)) {
          logger.warn("removed " + dir + ", a checkpoint whose writing or deletion was cut short");
        }
        if (checkpoint::list(start.run.path).empty()) {
          // A run that wrote a checkpoint keeps its newest: its metrics are not given up when
          // its checkpoints were removed.
          const std::string latest = checkpoint::latest_name(start.run.path);
          if (!latest.empty()) {
            throw UsageError(fmt::format(
                "{}: its checkpoints were removed (latest names {}, which is not there), and "
                "training it from the beginning would overwrite its metrics; start a new run, or "
                "remove {}/latest to train this one again from batch 0",
                start.run.path, latest, start.run.path));
          }
          restart_from_beginning(config, start.run, logger);
          return "";
        }
        return checkpoint::newest_good(start.run.path,
                                       [&](const std::string& w) { logger.warn(w); });
      }).get<std::string>();
  if (!start.resume_from.empty()) {
    start.searcher_metric_changed =
        accept_config_changes(config, start.resume_from, start.run, options.allow_safe_changes(),
                              dist.is_chief(), logger);
  }
  return start;
}

}  // namespace crucible::train
