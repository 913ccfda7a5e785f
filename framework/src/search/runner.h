#pragma once

// The experiment runner: runs a search's trials as `trainer fit` processes on this machine's
// slots and keeps the experiment directory.

#include <string>

#include <torch/arg.h>

#include <crucible/config.h>
#include <crucible/experiment.h>

namespace crucible::search {

struct SearchOptions {
  // The experiment directory to create; "": <host_path>/<name>/<id>.
  TORCH_ARG(std::string, output_dir);
  TORCH_ARG(std::string, resume_dir);  // an experiment directory to continue instead
  TORCH_ARG(std::string, trainer);     // the trainer program each trial process runs
  // Print the experiment's log lines and its table on stdout too.
  TORCH_ARG(bool, console) = true;
  // With resume_dir: accept a config that differs from the experiment's config.yaml in keys
  // safe on a search's resume (config::is_safe_search_change), and record it there.
  TORCH_ARG(bool, allow_safe_changes) = false;
};

// Runs the search that config.searcher names (grid, random or adaptive_asha) with the trial
// library config.entrypoint names, which must resolve from config.source_path's directory.
//
// The experiment directory holds config.yaml (the config, its entrypoint made absolute),
// experiment.log, experiment.jsonl (one row per trial event: created, validated, stopped,
// completed, failed, invalid, restarted), best (the path of the best trial's best checkpoint,
// relative to the directory) and, per trial, trials/<id>/ (its run), trials/<id>.yaml and
// trials/<id>.log. Trials run on local slots: one per core, or per slots_per_trial GPUs when
// CUDA is available, each process pinned to its slot's cores (OMP_NUM_THREADS to match) or
// given its GPUs (CUDA_VISIBLE_DEVICES). Inside a Slurm allocation (SLURM_JOB_ID set, no step),
// each trial is a job step instead (`srun --ntasks=slots_per_trial`), as many at once as
// SLURM_NTASKS / slots_per_trial, its ranks meeting at a store this process serves.
//
// A trial that fails is restarted from its last checkpoint up to max_restarts times, then
// recorded as failed; one that throws InvalidHyperparameters is recorded as invalid and
// replaced; one stopped by a signal sent to it alone (exit 4, after its checkpoint) is continued
// without using up a restart. A trial process that fails with a config or trial-library error
// ends the search with that error (Error with its exit code), after stopping the others, as any
// exception that ends the search does. SIGTERM, SIGUSR1,
// SIGINT and SIGHUP (passed on as SIGTERM), and a console line that fails because the console's
// reader went away (util::Logger::console_lost), stop every trial after its checkpoint, start no
// other, and return with `interrupted`. With resume_dir,
// the search replays experiment.jsonl and goes on from where it was, making the decisions an
// uninterrupted run makes, and records a "resumed" row. Its `config` is the experiment's
// config.yaml; one that differs from it is refused with a UsageError listing the changes, before
// anything is written, unless every change is safe on a search's resume and
// allow_safe_changes is set: then config.yaml records it, and each trial that resumes takes
// the changes into its own run (trainer fit --resume --set ... --allow-safe-changes).
SearchResult run_search(const ExperimentConfig& config, const SearchOptions& options);

// The path of program `name` in $PATH; throws UsageError naming it when there is none.
std::string find_program(const std::string& name);

// Whether `dir` holds an experiment (an experiment.jsonl) rather than a single run.
bool is_experiment_dir(const std::string& dir);

}  // namespace crucible::search
