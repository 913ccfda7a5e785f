#pragma once

// Running an experiment file the way `trainer fit` does, from a program of one's own.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include <crucible/config.h>
#include <crucible/distributed.h>
#include <crucible/errors.h>
#include <crucible/registry.h>
#include <crucible/trainer.h>

namespace crucible {

struct ExperimentOptions {
  // The experiment file. Exactly one of config_file and fit().resume_dir() is given; a resumed
  // run is read from <resume_dir>/config.yaml.
  TORCH_ARG(std::string, config_file);
  // Config overrides, each "dotted.key=value" with the value typed by YAML, applied in order.
  TORCH_ARG(std::vector<std::string>, overrides);
  // resources.slots_per_trial, in place of the file's.
  TORCH_ARG(std::optional<int64_t>, slots);
  // A run over `nnodes` machines: each runs run_experiment with its own node_rank and runs
  // slots_per_trial / nnodes workers; node 0 serves the rendezvous at master_addr:master_port,
  // both required with several nodes, on node 0 too (its workers tell the others that address);
  // with one node, an empty address is 127.0.0.1 and port 0 a free one.
  TORCH_ARG(int64_t, nnodes) = 1;
  TORCH_ARG(int64_t, node_rank) = 0;
  TORCH_ARG(std::string, master_addr);
  TORCH_ARG(int, master_port) = 0;
  // How each process fits (output_dir, resume_dir, test_mode, console, allow_safe_changes,
  // warm_start). Its distributed() is ignored: run_experiment sets it.
  TORCH_ARG(FitOptions, fit);
  // The command every launched worker runs: program and arguments. It must call run_experiment
  // with these same options. Empty: this process's own command line (/proc/self/exe and its
  // arguments).
  TORCH_ARG(std::vector<std::string>, worker_command);
  // The `trainer` program a search runs each trial with. Empty: this program when it is named
  // trainer, else the trainer installed beside the Crucible library (<prefix>/bin/trainer).
  TORCH_ARG(std::string, trainer_program);
};

// What a search (searcher grid, random or adaptive_asha) did.
struct SearchResult {
  std::string experiment_dir;
  // The trial with the best searcher.metric and that metric, if any trial validated; the best
  // checkpoint of that trial (what <experiment_dir>/best names).
  std::optional<int64_t> best_trial;
  double best_metric = 0;
  std::string best_checkpoint;
  // Trials by how they ended: completed (reached their length), stopped (by the searcher),
  // failed (after every restart) and invalid (hyperparameters the trial rejected).
  int64_t completed = 0, stopped = 0, failed = 0, invalid = 0;
  // Stopped by SIGTERM, SIGUSR1, SIGINT or SIGHUP, or because its console was closed; continue
  // with `trainer fit --resume experiment_dir`.
  bool interrupted = false;
};

struct ExperimentResult {
  // The exit code errors.h documents for the outcome: kExitOk, kExitStopped (stopped by a signal
  // after a checkpoint), or the exit code of the first launched worker that failed. A search
  // exits kExitOk when it ran to its end with at least one trial validated, kExitTrainingFailed
  // when none validated.
  int exit_code = kExitOk;
  // This process's fit; absent in a process that only launched the workers.
  std::optional<FitResult> fit;
  // When a launched worker failed: its rank, its exit status and the tail of its output.
  std::string failure;
  // The search, when the searcher is not single.
  std::optional<SearchResult> search;
};

// Runs an experiment: reads its config (config_file, or the run's config.yaml when resuming,
// with overrides and slots applied), loads its trial library (load_trial), and then
//   - when the searcher is grid, random or adaptive_asha: runs the search (README, "Search"):
//     an experiment directory (fit().output_dir(), or a new <host_path>/<name>/<id>) holding
//     config.yaml, experiment.log, experiment.jsonl, best and trials/<id>/, each trial a run of
//     trainer_program; fit().resume_dir() continues an experiment directory (overrides of keys
//     safe on a search's resume only, with fit().allow_safe_changes(); slots refused);
//   - in a process an outside launcher started (torchrun, mpirun, srun, or Crucible's own
//     launcher): joins that run (join_launched_run) and fits this rank;
//   - otherwise, when the run has several slots or nodes: starts this node's share of the
//     workers, each running worker_command, prefixes each line they print with "[rank R] " on
//     stdout or stderr, stops them all when one fails, and waits for them;
//   - otherwise: fits in this process.
// Forwards SIGTERM, SIGUSR1, SIGINT and SIGHUP to launched workers (a search stops its trials
// with SIGTERM on SIGHUP). A console whose reader went away (`trainer fit | head`: a pipe or local
// socket with no reader left, found at the next batch or the next line written, whichever comes
// first) stops the run, or the search and its trials, as SIGTERM does, after a checkpoint; so
// that a line written to it first cannot end the process, a SIGPIPE left at its default action gets
// a handler that does nothing (which programs this process execs do not inherit). Throws UsageError
// for inconsistent options, ConfigError, PluginError and the errors of Trainer::fit; a worker's
// failure is returned, not thrown.
ExperimentResult run_experiment(const ExperimentOptions& options);

// Evaluating a checkpoint the way `trainer validate` and `trainer predict` do.
struct EvaluationOptions {
  // A checkpoint: a checkpoint directory (a run's checkpoints/batch-<N>), a run directory or its
  // `latest` file (the run's newest good checkpoint), or an experiment directory or its `best`
  // file (the best checkpoint its search recorded). The config that checkpoint was written with
  // and its trial are used (Trainer::from_checkpoint).
  TORCH_ARG(std::string, checkpoint);
  // Processes of this machine that share the batches; absent: one, or as many as an outside
  // launcher started.
  TORCH_ARG(std::optional<int64_t>, slots);
  // run_prediction: the file rank 0 writes.
  TORCH_ARG(std::string, predictions_file) = "predictions.pt";
  // The command every launched worker runs, as ExperimentOptions::worker_command: it must call
  // the same function with these same options. Empty: this process's own command line.
  TORCH_ARG(std::vector<std::string>, worker_command);
};

struct EvaluationResult {
  // kExitOk, or the exit code of the first launched worker that failed, with `failure` naming
  // its rank, exit status and output tail.
  int exit_code = kExitOk;
  std::string failure;
  // Set only in the process that reports the outcome: the process that evaluated alone, or rank
  // 0 of the evaluating ranks; unset in the other ranks and in a process that only launched the
  // workers.
  std::optional<MetricValues> metrics;  // run_validation: the reduced validation metrics
  std::optional<int64_t> predictions;   // run_prediction: the rows written
};

// Restores options.checkpoint() and runs Trainer::validate / Trainer::predict on it:
//   - in a process an outside launcher started (torchrun, mpirun, srun, or the built-in
//     launcher), on the ranks it started, after joining them (join_launched_run);
//   - otherwise, with slots > 1, by starting `slots` workers on this machine, each running
//     worker_command, and waiting for them: rank 0's stdout passes through unprefixed, the rest
//     of their output is prefixed with "[rank R] ", and one failure stops them all;
//   - otherwise in this process.
// Throws UsageError when slots is below 1, differs from an outside launcher's count or does not
// divide global_batch_size, or (run_prediction) when predictions_file is a directory, lies in a
// directory that does not exist, or is one of a run's or an experiment's own files; and the
// errors of Trainer::from_checkpoint, validate and predict. A worker's failure is returned, not
// thrown.
EvaluationResult run_validation(const EvaluationOptions& options);
EvaluationResult run_prediction(const EvaluationOptions& options);

// The factory of the trial `config.entrypoint` names ("<library>:<TrialClass>"). A library given
// by name (lib<name>.so) is looked up in $CRUCIBLE_TRIAL_PATH (colon-separated), `search_dir`
// (default: the directory of config.source_path), the running program's directory and
// <prefix>/lib/crucible/trials; a path is taken relative to `search_dir`, then to the working
// directory. Throws PluginError when the library is not found (listing where it looked), cannot
// be loaded, is not a Crucible trial library or was built against another ABI, or when the
// class is not registered in it (listing those that are).
TrialFactory load_trial(const ExperimentConfig& config, const std::string& search_dir = "");

// What `trainer check` verifies, and what run_experiment verifies before it starts anything, so
// that the two agree: the trial library loads and registers the class (load_trial), the trial
// overrides exactly one of evaluate_batch and evaluate_full_dataset, and a search can be planned
// (every numeric hyperparameter of a grid has a count), and this machine's device and LibTorch
// can run it (fp16 needs CUDA; distributed_backend nccl needs NCCL and a GPU), and a warm start's
// searcher.source_trial_id or source_checkpoint_uuid names a run or a checkpoint. Returns the
// trial's factory. Throws PluginError or ConfigError naming the problem.
TrialFactory check_experiment(const ExperimentConfig& config);

// What the search of `config` runs, in two lines (`trainer check` prints them): its searcher,
// its trials (a grid's points per hyperparameter; each adaptive ASHA bracket's trials and rung
// lengths) and how many the searcher lets run at once; then "here: " and how many run at once
// when this process runs the search (search::Placement::at_once). "" for searcher single.
// Throws ConfigError naming the place when the search cannot be planned, and UsageError naming
// a malformed Slurm variable.
std::string describe_search(const ExperimentConfig& config);

// Joins the distributed run that an outside launcher started this process in, as its
// environment describes it (torchrun's RANK, WORLD_SIZE, ...; Open MPI's OMPI_COMM_WORLD_*;
// a Slurm step's SLURM_*): connects to the rendezvous store and builds the process groups that
// resources.distributed_backend picks. Every wait for another rank fails after
// resources.distributed_timeout_seconds, or $CRUCIBLE_DIST_TIMEOUT seconds when set. Returns
// nullopt when the environment describes no run. The ranks are compared when they meet: each
// must be of the same world size, run the same Crucible and LibTorch and have the same resolved
// config (but checkpoint_storage and a warm start's source paths, which are each node's own).
// Throws UsageError naming a malformed variable, or the rank that differs and how;
// PeerLostError (exit 5) naming the rank, the address and the cause when the store does not
// answer or another rank does not join in time (naming that rank); TrainingError when this rank
// cannot serve the store or build its process groups. Where SIGPIPE has its default action, it
// gets a handler that does nothing, so that a peer that goes away fails the collective writing
// to it rather than killing this process.
std::optional<DistributedContext> join_launched_run(const ExperimentConfig& config);

}  // namespace crucible
