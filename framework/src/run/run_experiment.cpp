#include <crucible/experiment.h>

#include <iostream>

#include <fmt/format.h>

#include "distributed/backend.h"
#include "distributed/rendezvous.h"
#include "launch/launcher.h"
#include "plugin/loader.h"
#include "run/own_command.h"
#include "search/runner.h"
#include "search/scheduler.h"
#include "search/slots.h"
#include "train/run_dir.h"
#include "train/run_start.h"
#include "train/warm_start.h"
#include "util/broken_pipes.h"
#include "util/file_system.h"

namespace crucible {
namespace {

// Runs this node's share of the run's `slots` workers under the built-in launcher.
ExperimentResult launch_workers(const ExperimentOptions& o, int64_t slots) {
  if (slots % o.nnodes() != 0) {
    throw UsageError(fmt::format(
        "resources.slots_per_trial ({}) must be a multiple of --nnodes ({}): every node runs "
        "the same number of slots",
        slots, o.nnodes()));
  }
  if (o.nnodes() > 1 && o.master_addr().empty()) {
    throw UsageError(
        "a run over several nodes needs --master-addr: node 0's address, which every node "
        "reaches (on node 0 too: its workers give it to the other nodes' workers)");
  }
  const auto options =
      launch::LaunchOptions()
          .command(o.worker_command().empty() ? run::own_command_line() : o.worker_command())
          .slots(slots / o.nnodes())
          .nnodes(o.nnodes())
          .node_rank(o.node_rank())
          .master_addr(o.master_addr().empty() ? "127.0.0.1" : o.master_addr())
          .master_port(o.master_port());
  const launch::LaunchResult launched = launch::launch(options, std::cout, std::cerr);
  ExperimentResult result;
  result.exit_code = launched.exit_code;
  result.failure = launched.failure;
  return result;
}

// The trainer program a search runs its trials with (ExperimentOptions::trainer_program).
std::string trainer_program(const ExperimentOptions& o) {
  if (!o.trainer_program().empty()) return util::absolute(o.trainer_program());
  const std::string own = util::read_symlink("/proc/self/exe");
  if (util::file_name(own) == "trainer") return own;
  const std::string installed =
      util::join(util::parent_path(plugin::crucible_library_dir()), "bin/trainer");
  if (util::is_regular_file(installed)) return installed;
  throw UsageError(
      fmt::format("a search runs its trials with the trainer program, and there is none at {}; set "
                  "ExperimentOptions::trainer_program",
                  installed));
}

// Runs the search of `config`, refusing the options that only a single run has.
ExperimentResult run_search(const ExperimentOptions& o, const ExperimentConfig& config) {
  const FitOptions& fit = o.fit();
  if (o.nnodes() > 1 || o.node_rank() != 0 || !o.master_addr().empty() || o.master_port() != 0) {
    throw UsageError(
        "a search runs on one machine; --nnodes, --node-rank, --master-addr and --master-port "
        "are for a run");
  }
  if (fit.test_mode()) {
    throw UsageError(
        "--test-mode checks one trial: run it with --set searcher.name=single and a constant "
        "value for each searched hyperparameter (--set hyperparameters.NAME=VALUE)");
  }
  if (!fit.warm_start().empty()) throw UsageError("--warm-start starts a run, not a search");
  ExperimentResult result;
  result.search = search::run_search(config, search::SearchOptions()
                                                 .output_dir(fit.output_dir())
                                                 .resume_dir(fit.resume_dir())
                                                 .trainer(trainer_program(o))
                                                 .console(fit.console())
                                                 .allow_safe_changes(fit.allow_safe_changes()));
  result.exit_code = result.search->interrupted  ? kExitStopped
                     : result.search->best_trial ? kExitOk
                                                 : kExitTrainingFailed;
  if (result.exit_code == kExitTrainingFailed) {
    result.failure = fmt::format("no trial of the search validated; see {}/experiment.log",
                                 result.search->experiment_dir);
  }
  return result;
}

// `config` on as many slots as the outside launcher started processes, re-validated. Refuses
// with a UsageError a run that resumes, or a --slots, with another number.
ExperimentConfig adopt_launcher_slots(const ExperimentOptions& o, const std::string& path,
                                      std::vector<std::string> overrides,
                                      const ExperimentConfig& config,
                                      const dist::Rendezvous& launcher) {
  const int64_t started = launcher.topology.size;
  const std::string processes =
      fmt::format("{} started {} process{}", launcher.source, started, started == 1 ? "" : "es");
  if (o.slots()) {
    throw UsageError(
        fmt::format("--slots {} but {}; give the launcher's count or leave --slots out", *o.slots(),
                    processes));
  }
  if (!o.fit().resume_dir().empty()) {
    throw UsageError(fmt::format(
        "--resume {}: the run trains on {} slots (resources.slots_per_trial) but {}; a run "
        "continues on the slots it started with",
        o.fit().resume_dir(), config.resources.slots_per_trial, processes));
  }
  overrides.push_back(fmt::format("resources.slots_per_trial={}", started));
  ExperimentConfig adopted = load_experiment_config(path, overrides);
  if (launcher.topology.rank == 0) {
    std::cerr << fmt::format(
        "{}: training on {} slots (the experiment file's resources.slots_per_trial is {}; the "
        "run's config.yaml records {})\n",
        processes, started, config.resources.slots_per_trial, started);
  }
  return adopted;
}

}  // namespace

TrialFactory check_experiment(const ExperimentConfig& config) {
  TrialFactory factory = load_trial(config);
  factory.check_evaluation_methods();
  train::check_device_support(config, dist::rank_device(0));
  // NCCL asked for without it or without a GPU; whether ranks would share a GPU depends on the
  // nodes, which the run checks when it starts.
  if (config.resources.slots_per_trial > 1) {
    dist::use_nccl(config.resources.distributed_backend, dist::rank_device(0), 1);
  }
  if (config.searcher.name != SearcherName::kSingle) search::Scheduler plan(config);
  if (config.searcher.name == SearcherName::kSingle) config.constant_hyperparameters();
  train::check_warm_start_source(config);
  return factory;
}

std::string describe_search(const ExperimentConfig& config) {
  if (config.searcher.name == SearcherName::kSingle) return "";
  const search::Scheduler plan(config);
  const search::Placement here =
      search::place_trials(dist::process_environment(), config.resources.slots_per_trial);
  return fmt::format("{}\nhere: {}", plan.plan(),
                     here.at_once(plan.concurrency(), config.resources.slots_per_trial));
}

ExperimentResult run_experiment(const ExperimentOptions& options) {
  util::survive_broken_pipes();
  const std::string& resume = options.fit().resume_dir();
  if (options.config_file().empty() == resume.empty()) {
    throw UsageError("trainer fit needs exactly one of CONFIG and --resume RUN_DIR");
  }
  if (!resume.empty() && !options.fit().output_dir().empty()) {
    throw UsageError(
        "--resume continues a run in its own directory; --output cannot be combined with it");
  }
  if (resume.empty() && options.fit().allow_safe_changes()) {
    throw UsageError(
        "--allow-safe-changes accepts changes to a run on --resume RUN_DIR, and "
        "there is no --resume");
  }
  const std::string path = resume.empty() ? options.config_file() : resume + "/config.yaml";
  if (!resume.empty()) train::open_run_dir(resume);  // refuses a directory without a run
  std::vector<std::string> overrides = options.overrides();
  if (options.slots()) {
    if (!resume.empty()) {
      // Refused here, before any process starts, as the run's start would refuse it.
      const ExperimentConfig started = load_experiment_config(path);
      const int64_t recorded = started.resources.slots_per_trial;
      if (started.searcher.name != SearcherName::kSingle) {
        throw UsageError(fmt::format(
            "--resume {}: a search's trials train on its resources.slots_per_trial; --slots is "
            "for a run",
            resume));
      }
      if (recorded != *options.slots()) {
        throw UsageError(fmt::format(
            "--resume {}: the run trains on {} slot{} (resources.slots_per_trial) and --slots "
            "asks for {}; a run continues on the slots it started with: leave --slots out",
            resume, recorded, recorded == 1 ? "" : "s", *options.slots()));
      }
    }
    overrides.push_back(fmt::format("resources.slots_per_trial={}", *options.slots()));
  }
  ExperimentConfig config = load_experiment_config(path, overrides);
  const std::optional<dist::Rendezvous> launcher =
      dist::from_environment(dist::process_environment());
  const bool launched = launcher.has_value();
  if (launched && !launcher->started_by_crucible &&
      (options.nnodes() != 1 || options.node_rank() != 0 || !options.master_addr().empty() ||
       options.master_port() != 0)) {
    throw UsageError(fmt::format(
        "--nnodes, --node-rank, --master-addr and --master-port are for trainer's own launcher, "
        "but {} started this process and its variables place it; leave them out",
        launcher->source));
  }
  if (launched && config.searcher.name == SearcherName::kSingle &&
      config.resources.slots_per_trial != launcher->topology.size) {
    config = adopt_launcher_slots(options, path, overrides, config, *launcher);
  }
  if (!launched && (options.node_rank() < 0 || options.node_rank() >= options.nnodes())) {
    throw UsageError(fmt::format("--node-rank {} is outside --nnodes {}", options.node_rank(),
                                 options.nnodes()));
  }
  // Once per experiment: by the process a user started, not by every worker.
  if (!launched) {
    for (const std::string& warning : config.warnings) std::cerr << "warning: " << warning << "\n";
  }
  TrialFactory factory = check_experiment(config);
  if (config.searcher.name != SearcherName::kSingle) {
    if (launched) {
      throw UsageError(
          "a search starts its trials' processes itself; run `trainer fit` on it without "
          "torchrun, mpirun or srun");
    }
    return run_search(options, config);
  }
  const int64_t slots = config.resources.slots_per_trial;
  std::optional<DistributedContext> joined = join_launched_run(config);
  if (!joined && (slots > 1 || options.nnodes() > 1)) {
    dist::use_nccl(config.resources.distributed_backend, dist::rank_device(0),
                   slots / options.nnodes());
    // Refused once here rather than by every rank.
    train::check_resume_options(options.fit());
    if (!resume.empty()) {
      train::check_resume_config(config, train::open_run_dir(resume),
                                 options.fit().allow_safe_changes());
    }
    return launch_workers(options, slots);
  }
  if (!joined && (!options.master_addr().empty() || options.master_port() != 0)) {
    std::cerr << "warning: --master-addr and --master-port are ignored: a run of 1 slot on 1 node "
                 "has no rendezvous\n";
  }
  FitOptions fit = options.fit();
  fit.distributed(joined ? *joined : DistributedContext());
  ExperimentResult result;
  result.fit = Trainer(std::move(config), std::move(factory)).fit(fit);
  result.exit_code = result.fit->stopped ? kExitStopped : kExitOk;
  return result;
}

}  // namespace crucible
