#include "search/runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include <crucible/errors.h>
#include <crucible/metrics.h>

#include "checkpoint/checkpoint.h"
#include "config/diff.h"
#include "config/enum_names.h"
#include "config/paths.h"
#include "config/schema.h"
#include "config/yaml_reader.h"
#include "distributed/rendezvous.h"
#include "launch/launcher.h"
#include "launch/process.h"
#include "metrics/metric_name.h"
#include "plugin/loader.h"
#include "search/experiment_log.h"
#include "search/experiment_retention.h"
#include "search/scheduler.h"
#include "search/slots.h"
#include "search/summary.h"
#include "search/trial_process.h"
#include "train/run_dir.h"
#include "util/file_io.h"
#include "util/file_system.h"
#include "util/logger.h"
#include "util/stop_handlers.h"

namespace crucible::search {
namespace {

using Clock = std::chrono::steady_clock;

// A seed for a search whose config gives none: from the system's entropy, below 2^63 so that an
// experiment file can hold it.
uint64_t draw_seed() {
  std::random_device entropy;
  const uint64_t high = entropy(), low = entropy();
  return ((high << 32) | low) >> 1;
}

// `config` with its entrypoint and paths absolute, as the experiment's config.yaml records them.
ExperimentConfig with_absolute_paths(ExperimentConfig config) {
  config.entrypoint = plugin::absolute_entrypoint(config.entrypoint, config::config_dir(config));
  config::make_paths_absolute(config);
  return config;
}

// A segment being trained by a process.
struct InFlight {
  Segment segment;
  size_t slot = 0;
  pid_t pid = -1;
  c10::intrusive_ptr<c10d::TCPStore> store;  // a job step's rendezvous, served here
};

class Runner {
 public:
  Runner(const ExperimentConfig& config, const SearchOptions& options)
      : config_(with_absolute_paths(config)), options_(options) {}

  SearchResult run() {
    open();
    try {
      return search();
    } catch (const std::exception& e) {
      stop_all(SIGTERM);  // no trial process outlives the search that started it
      record_failure(e);
      throw;
    } catch (...) {
      stop_all(SIGTERM);
      throw;
    }
  }

 private:
  // Runs the search that open() set up to its end, or until a signal or a closed console stops
  // it.
  SearchResult search() {
    launch::SignalCatcher signals;
    while (true) {
      take_results();
      const std::vector<Segment> order = scheduler_->running();
      if (order.empty()) break;
      if (signals.take_question()) {
        for (const auto& f : running_) ::kill(f.pid, util::kWhereSignal);
      }
      const int sig = signals.take();
      const std::string console_lost = logger_.console_lost();
      if (sig != 0 || !console_lost.empty()) {
        // Job steps' srun passes SIGTERM on to the trial: a hang-up stops trials with it too.
        stop_all(sig != 0 && sig != SIGHUP ? sig : SIGTERM);
        const std::string again = fmt::format("continue with `trainer fit --resume {}`", dir_);
        if (sig != 0) {
          logger_.info(fmt::format("stopped by signal {} ({}); {}", sig, strsignal(sig), again));
        } else {
          logger_.warn(
              fmt::format("the console was closed ({}): stopped every trial as on SIGTERM, with a "
                          "checkpoint; {}",
                          console_lost, again));
        }
        SearchResult r = result();
        r.interrupted = true;
        return r;
      }
      for (const Segment& s : order) {
        if (done_.count(s.trial) || in_flight(s.trial)) continue;
        const auto slot = std::find(busy_.begin(), busy_.end(), false);
        if (slot == busy_.end()) break;
        start(s, static_cast<size_t>(slot - busy_.begin()));
      }
      wait_for_exit();
    }
    std::vector<std::string> trial_runs;
    for (const auto& [id, t] : scheduler_->trials()) {
      const std::string run = TrialFiles(dir_, id).run_dir;
      if (util::exists(run)) trial_runs.push_back(run);
    }
    const auto warn = [&](const std::string& line) { logger_.warn(line); };
    const ExperimentRetention kept = keep_experiment_best(config_, trial_runs, warn);
    const std::string why =
        fmt::format("kept by neither its trial's retention nor the experiment's {} best",
                    config_.checkpoint_storage.save_experiment_best);
    for (const std::string& dir : kept.deleted) {
      logger_.info(fmt::format("removed {}: {}", relative(dir), why));
    }
    for (const std::string& dir : kept.being_read) {
      logger_.info(
          fmt::format("kept {} for now ({}): {}", relative(dir), why, checkpoint::kLeftToReader));
    }
    const SearchResult r = result();
    const std::string table = summary_table(*scheduler_, config_.searcher.metric);
    logger_.info("search done:\n" + table);
    if (r.best_trial) {
      // With checkpoint_policy none the best validation may have no checkpoint of its own.
      std::string held;
      if (!r.best_checkpoint.empty()) {
        std::optional<double> value;
        try {
          value = metrics::find_validation_metric(
              checkpoint::metadata(r.best_checkpoint).validation, config_.searcher.metric);
        } catch (const std::exception&) {
          // Its metadata was damaged since: `best` still names it; the line says no more.
        }
        if (value && *value != r.best_metric) {
          held = fmt::format(" (validated at {}: the best validation's checkpoint was not kept)",
                             *value);
        }
      }
      logger_.info(fmt::format("best: trial {} ({} {}), checkpoint {}{}", *r.best_trial,
                               config_.searcher.metric, r.best_metric, r.best_checkpoint, held));
    }
    logger_.info("HTML report: trainer report " + dir_);
    return r;
  }

  void open() {
    // The slots first: a malformed Slurm variable leaves no experiment directory behind.
    placement_ = place_trials(dist::process_environment(), config_.resources.slots_per_trial);
    // A requeued job reruns its command: an --output holding this experiment continues it.
    if (options_.resume_dir().empty() && !options_.output_dir().empty()) {
      train::check_output_dir(options_.output_dir());
    }
    const bool rerun =
        options_.resume_dir().empty() && train::holds_run_of(config_, options_.output_dir());
    const bool resuming = rerun || !options_.resume_dir().empty();
    std::optional<uint64_t>& seed = config_.reproducibility.experiment_seed;
    bool drawn = false;
    std::vector<config::Change> accepted;
    if (resuming) {
      dir_ = rerun ? options_.output_dir() : options_.resume_dir();
      lock_ = train::lock_run_dir(dir_, [&](const std::string& w) { logger_.warn(w); });
      if (!rerun) accepted = accept_changes();
      // A rerun's config may leave out the seed its experiment drew and recorded.
      if (!seed) {
        seed =
            load_experiment_config(util::join(dir_, "config.yaml")).reproducibility.experiment_seed;
      }
    } else if (!seed) {
      seed = draw_seed();  // a random or adaptive_asha search: other configs hold one
      drawn = true;
    }
    // Planned before a new experiment's directory exists: a search that cannot be planned
    // leaves nothing behind.
    scheduler_.emplace(config_);
    if (!resuming) {
      dir_ = train::new_run_path(config_, options_.output_dir());
      lock_ = train::lock_run_dir(dir_, [&](const std::string& w) { logger_.warn(w); });
      util::create_directories(util::join(dir_, "trials"));
      util::replace_atomically(util::join(dir_, "config.yaml"), to_yaml(config_));
    }
    logger_.open(util::join(dir_, "experiment.log"), options_.console());
    log_.emplace(util::join(dir_, "experiment.jsonl"));
    busy_.assign(placement_.slots.size(), false);
    if (resuming) {
      replay();
      check_unchanged_by_hand();
      logger_.info(fmt::format("resuming experiment {}{}: {} trials so far, {} running", dir_,
                               rerun ? " (it holds this experiment's config)" : "",
                               scheduler_->trials().size(), scheduler_->running().size()));
      nlohmann::json resumed = {{"event", event_names().name(TrialEvent::kResumed)}};
      if (!accepted.empty()) {
        // Recorded once the resume can no longer be refused (a damaged log, a replay that does
        // not match): a refused resume leaves config.yaml as it was.
        util::replace_atomically(util::join(dir_, "config.yaml"), to_yaml(config_));
        logger_.info("accepted config changes:" +
                     config::change_list(accepted, config::is_safe_search_change));
        resumed["changes"] = nlohmann::json::array();
        for (const auto& c : accepted) resumed["changes"].push_back(config::change_text(c));
      }
      log_->append({std::move(resumed)});
    } else {
      logger_.info(fmt::format(
          "experiment {}: searcher {}, {}", dir_,
          config::names<SearcherName>().name(config_.searcher.name),
          placement_.at_once(scheduler_->concurrency(), config_.resources.slots_per_trial)));
      logger_.info("search " + scheduler_->plan());
      if (drawn) {
        logger_.info(fmt::format(
            "seed {} drawn (no reproducibility.experiment_seed given), recorded in config.yaml; "
            "set reproducibility.experiment_seed: {} to draw these trials again",
            *seed, *seed));
      }
      write(scheduler_->start());
    }
  }

  // On --resume: the changes from the experiment's config.yaml to config_ (its --set overrides),
  // for open() to write into config.yaml once the resume has replayed the log. Throws UsageError
  // listing them when one is not safe on a search's resume (config::is_safe_search_change), or
  // when there are any and options_ does not allow safe changes.
  std::vector<config::Change> accept_changes() {
    const std::string file = util::join(dir_, "config.yaml");
    const auto changes = config::diff(with_absolute_paths(load_experiment_config(file)), config_);
    if (changes.empty()) return changes;
    const std::string list = config::change_list(changes, config::is_safe_search_change);
    if (!std::all_of(changes.begin(), changes.end(),
                     [](const auto& c) { return config::is_safe_search_change(c.key); })) {
      throw UsageError(fmt::format(
          "--resume {}: the config differs from the experiment's {}:{}\nOnly the keys `trainer "
          "keys` marks safe (periods, reporting, retention, profiling, max_restarts) may change "
          "when a search resumes; the trials' length and what the searcher decides by stay. "
          "Start a new experiment for the others.",
          dir_, file, list));
    }
    if (!options_.allow_safe_changes()) {
      throw UsageError(fmt::format(
          "--resume {}: the config differs from the experiment's {}:{}\nThese changes are safe; "
          "pass --allow-safe-changes to accept them.",
          dir_, file, list));
    }
    return changes;
  }

  // On a resume: compares config_ with the config its first trial started from (trials/<id>.yaml,
  // as trial_config made it from the experiment's config then). A key that differs and that no
  // search's resume may change (config::is_safe_search_change) was changed by hand in config.yaml,
  // which would give the trials to come another config than those before: throws UsageError
  // listing them. A trial file that is missing or unreadable is passed over.
  void check_unchanged_by_hand() const {
    for (const auto& [id, trial] : scheduler_->trials()) {
      const TrialFiles files(dir_, id);
      if (!util::exists(files.config_file)) continue;
      std::optional<ExperimentConfig> started;
      try {
        started = load_experiment_config(files.config_file);
      } catch (const Error&) {
        continue;
      }
      std::vector<config::Change> edited;
      for (auto& c :
           config::diff(*started, trial_config(config_, trial.hparams, started->max_length))) {
        if (!config::is_safe_search_change(c.key)) edited.push_back(std::move(c));
      }
      if (edited.empty()) return;
      throw UsageError(fmt::format(
          "--resume {}: {} differs from the config trial {} started with ({}) in keys that no "
          "resume may change:{}\nWas config.yaml edited? Put those keys back as they were, or "
          "start a new experiment.",
          dir_, util::join(dir_, "config.yaml"), id, files.config_file,
          config::change_list(edited, config::is_safe_search_change)));
    }
  }

  // Replays experiment.jsonl on the scheduler (Scheduler::replay), records the rows it decided
  // and the log lacks, and counts each trial's restarts.
  void replay() {
    const auto& rows = log_->rows();
    std::vector<nlohmann::json> unrecorded =
        scheduler_->replay(rows, util::join(dir_, "experiment.jsonl"));
    for (const auto& row : rows) {
      if (uses_a_restart(row)) ++restarts_[row.value("trial", int64_t{0})];
    }
    if (!unrecorded.empty()) write(std::move(unrecorded));
  }

  void write(std::vector<nlohmann::json> rows) {
    for (const auto& row : rows) logger_.info(describe_row(row, config_.searcher.metric, unit()));
    log_->append(std::move(rows));
  }

  const char* unit() const { return config::names<LengthUnit>().name(scheduler_->unit()); }

  bool in_flight(int64_t trial) const {
    return std::any_of(running_.begin(), running_.end(),
                       [&](const InFlight& f) { return f.segment.trial == trial; });
  }

  // Reports the results that are due, in the scheduler's order.
  void take_results() {
    while (true) {
      const auto order = scheduler_->running();
      if (order.empty()) return;
      const auto found = done_.find(order.front().trial);
      if (found == done_.end()) return;
      const SegmentResult r = found->second;
      done_.erase(found);
      write(scheduler_->report(r));
      update_best();
    }
  }

  void start(const Segment& s, size_t slot) {
    const TrialFiles files(dir_, s.trial);
    const Length length{scheduler_->unit(), s.length};
    std::vector<std::string> command = segment_command(options_.trainer(), files, config_,
                                                       scheduler_->trials().at(s.trial), length);
    const Slot& where = placement_.slots[slot];
    std::map<std::string, std::string> env = {{"OMP_NUM_THREADS", std::to_string(where.threads)}};
    if (!where.cuda_devices.empty()) env["CUDA_VISIBLE_DEVICES"] = where.cuda_devices;
    InFlight f{s, slot, -1, {}};
    if (!placement_.slurm_job.empty()) {
      // A job step of slots_per_trial tasks, each a rank that meets the others at a store
      // served here (srun gives them this node's address as SLURM_LAUNCH_NODE_IPADDR).
      f.store = launch::serve_store("0.0.0.0", 0);
      env["MASTER_PORT"] = std::to_string(f.store->getPort());
      env["CRUCIBLE_STORE_HOSTED"] = "1";
      command.insert(
          command.begin(),
          {find_program("srun"), fmt::format("--ntasks={}", config_.resources.slots_per_trial),
           fmt::format("--cpus-per-task={}", where.threads), "--kill-on-bad-exit=1",
           fmt::format("--job-name={}-trial-{}", config_.name, s.trial)});
    }
    const int fd = ::open(files.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      throw TrainingError(fmt::format("cannot open {}: {}", files.log_file, std::strerror(errno)));
    }
    try {
      f.pid = launch::spawn(command, launch::environment_with(env), fd, fd,
                            fmt::format("trial {}", s.trial), where.cpus);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    busy_[slot] = true;
    running_.push_back(std::move(f));
  }

  // The first trial process that has exited, with its wait status, removed from running_.
  // Waits for its own children only: a program that runs a search may have others.
  std::optional<std::pair<InFlight, int>> reap() {
    for (auto it = running_.begin(); it != running_.end(); ++it) {
      int status = 0;
      if (::waitpid(it->pid, &status, WNOHANG) == it->pid) {
        const InFlight f = *it;
        running_.erase(it);
        busy_[f.slot] = false;
        return std::make_pair(f, status);
      }
    }
    return std::nullopt;
  }

  // Waits up to a moment for a trial process to exit and handles it.
  void wait_for_exit() {
    if (const auto exit = reap()) {
      exited(exit->first, exit->second);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  void exited(const InFlight& f, int status) {
    const int64_t trial = f.segment.trial;
    const TrialFiles files(dir_, trial);
    const int code = launch::exit_code_of(status);
    if (code == kExitOk) {
      try {
        done_[trial] =
            read_segment_result(files, trial, {scheduler_->unit(), f.segment.length},
                                config_.searcher.metric, config_.searcher.smaller_is_better);
        return;
      } catch (const Error& e) {
        fail_search(e.what(), e.exit_code());
      }
    }
    const std::string error = last_error(files.log_file);
    if (code == kExitInvalidHyperparameters) {
      done_[trial] = {SegmentResult::Kind::kInvalid, trial, 0, 0, "", error, std::nullopt};
      return;
    }
    if (code == kExitBadUsage || code == kExitPlugin) {
      const std::string mended = at_experiment_place(error, files.config_file);
      fail_search(
          fmt::format("trial {} {}: {} ({}its output: {})", trial, launch::describe(status), mended,
                      mended == error ? "" : "the trial's config is " + files.config_file + "; ",
                      files.log_file),
          code);
    }
    int64_t& restarts = restarts_[trial];
    // A process killed before it wrote a line leaves nothing to quote.
    const std::string why = error.empty() ? launch::describe(status)
                                          : fmt::format("{}: {}", launch::describe(status), error);
    if (code == kExitStopped) {
      // Stopped from outside the search (a signal to the trial alone, a job step's), with a
      // checkpoint: no failure, so it continues without using up a restart.
      write({{{"event", event_names().name(TrialEvent::kRestarted)},
              {"trial", trial},
              {"stopped", true},
              {"error", why}}});
      return;
    }
    if (restarts < config_.max_restarts) {
      ++restarts;
      write({{{"event", event_names().name(TrialEvent::kRestarted)},
              {"trial", trial},
              {"restart", restarts},
              {"max_restarts", config_.max_restarts},
              {"error", why}}});
      return;  // the segment is still running in the scheduler: it starts again
    }
    done_[trial] = {SegmentResult::Kind::kFailed,
                    trial,
                    reached_length(files, scheduler_->unit()),
                    0,
                    "",
                    why,
                    std::nullopt};
  }

  // Records in experiment.log and experiment.jsonl the error that ends the search, so that the
  // experiment tells what ended it (trainer report). A failure to record it (a full disk) leaves
  // the error to the caller alone.
  void record_failure(const std::exception& e) {
    const auto* error = dynamic_cast<const Error*>(&e);
    const int code = error ? error->exit_code() : kExitTrainingFailed;
    try {
      const std::string message = message_without_trace(e);
      logger_.error(
          fmt::format("the search ended with an error (exit code {}): {}", code, message));
      log_->append({{{"event", event_names().name(TrialEvent::kSearchFailed)},
                     {"error", message},
                     {"exit_code", code}}});
    } catch (const std::exception&) {
      // The caller reports `e`, which matters more than its record.
    }
  }

  // A trial's config error names the place in its own config file (trials/<id>.yaml, which the
  // search wrote): `error` with that place replaced by the key's place in the experiment's file
  // (or the --set that gave it), where it is mended; `error` itself when it names no key of
  // `trial_file`. A segment that resumes a trial reads its run's config.yaml instead, and its
  // errors keep that place. Keys the search sets per trial (hyperparameters, max_length) are
  // placed at the experiment's spec of them, whose value differs from the trial's.
  std::string at_experiment_place(const std::string& error, const std::string& trial_file) const {
    // "<trial_file>:<line>:<column>: <key>: <message>"
    if (error.rfind(trial_file + ":", 0) != 0) return error;
    size_t at = trial_file.size();
    for (int part = 0; part < 2; ++part) {
      const size_t digits = error.find_first_not_of("0123456789", at + 1);
      if (digits == std::string::npos || digits == at + 1 || error[digits] != ':') return error;
      at = digits;
    }
    const size_t key_end = error.find(": ", at + 2);
    if (error.compare(at, 2, ": ") != 0 || key_end == std::string::npos) return error;
    const std::string key = error.substr(at + 2, key_end - at - 2);
    if (config::find_key(key) == nullptr) return error;
    return config::key_place(config_, key) + error.substr(at);
  }

  [[noreturn]] void fail_search(const std::string& message, int code) {
    stop_all(SIGTERM);
    throw Error(message, code);
  }

  // Sends `sig` to every trial process and waits for them (SIGKILL after two minutes).
  // Passes `sig` on to every running trial and waits for them to exit, passing on a second SIGINT
  // too (it ends them at once, without a checkpoint).
  void stop_all(int sig) {
    for (const auto& f : running_) ::kill(f.pid, sig);
    if (sig == SIGINT && !running_.empty()) util::notice_interrupt_on_terminal();
    const auto deadline = Clock::now() + std::chrono::minutes(2);
    while (!running_.empty()) {
      if (launch::SignalCatcher::take() == SIGINT) {
        for (const auto& f : running_) ::kill(f.pid, SIGINT);
      }
      if (reap()) continue;
      if (Clock::now() > deadline) {
        for (const auto& f : running_) ::kill(f.pid, SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  void update_best() {
    const auto best = scheduler_->best_trial();
    if (!best) return;
    const std::string checkpoint =
        best_checkpoint(TrialFiles(dir_, *best).run_dir, config_.searcher.metric,
                        config_.searcher.smaller_is_better);
    if (checkpoint.empty() || checkpoint == best_checkpoint_) return;
    best_checkpoint_ = checkpoint;
    util::replace_atomically(util::join(dir_, "best"), relative(checkpoint) + "\n");
  }

  std::string relative(const std::string& path) const {
    const std::string prefix = dir_ + "/";
    return path.rfind(prefix, 0) == 0 ? path.substr(prefix.size()) : path;
  }

  SearchResult result() {
    update_best();
    SearchResult r;
    r.experiment_dir = dir_;
    for (const auto& [id, t] : scheduler_->trials()) {
      r.completed += t.state == TrialState::kCompleted ? 1 : 0;
      r.stopped += t.state == TrialState::kStopped ? 1 : 0;
      r.failed += t.state == TrialState::kFailed ? 1 : 0;
      r.invalid += t.state == TrialState::kInvalid ? 1 : 0;
    }
    r.best_trial = scheduler_->best_trial();
    if (r.best_trial) {
      r.best_metric = *scheduler_->trials().at(*r.best_trial).best_metric;
      r.best_checkpoint = best_checkpoint_;
    }
    return r;
  }

  ExperimentConfig config_;
  SearchOptions options_;
  std::optional<Scheduler> scheduler_;  // planned by open(), once the seed is known
  std::string dir_;
  std::shared_ptr<util::FileLock> lock_;  // held while the search writes dir_
  util::Logger logger_;
  std::optional<ExperimentLog> log_;
  Placement placement_;
  std::vector<bool> busy_;
  std::vector<InFlight> running_;
  std::map<int64_t, SegmentResult> done_;
  std::map<int64_t, int64_t> restarts_;
  std::string best_checkpoint_;
};

}  // namespace

std::string find_program(const std::string& name) {
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = util::join(dirs.substr(start, end - start), name);
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  throw UsageError(fmt::format("{} is not on PATH ({})", name, dirs));
}

bool is_experiment_dir(const std::string& dir) {
  return util::exists(util::join(dir, "experiment.jsonl"));
}

SearchResult run_search(const ExperimentConfig& config, const SearchOptions& options) {
  return Runner(config, options).run();
}

}  // namespace crucible::search
