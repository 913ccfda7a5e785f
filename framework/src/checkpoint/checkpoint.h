#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <crucible/optim.h>
#include <crucible/trial.h>

namespace crucible::checkpoint {

// Everything a checkpoint holds, by reference to the live objects.
//
// On disk, a checkpoint is a directory <run>/checkpoints/batch-<NNNNNNNNNN>/ with
//   metadata.json      versions, trial, hyperparameters, counters, validation metrics
//   model_<i>.pt       parameters and buffers of wrapped model i (torch::serialize archive)
//   optimizer_<i>.pt   state of wrapped optimizer i
//   trial_state.pt     Trial::save_state, and the CPU generator's state
// Scheduler step counts, counters and the data position live in metadata.json.
struct Contents {
  std::vector<std::shared_ptr<torch::nn::Module>> models;
  std::vector<Optimizer> optimizers;
  std::vector<std::shared_ptr<LRScheduler>> schedulers;
  Trial* trial = nullptr;
};

// The directory name of the checkpoint taken after `batches` batches.
std::string directory_name(int64_t batches);

// Writes a checkpoint of `contents` to `dir` atomically: into a temporary sibling, then renamed.
// `metadata` is extended with the scheduler step counts and written as metadata.json. Throws
// TrainingError naming the path on any I/O failure; an existing checkpoint is never touched.
void save(const std::string& dir, const Contents& contents, nlohmann::json metadata);

// Restores `contents` from `dir` and returns its metadata. Throws TrainingError naming the file
// when something is missing, unreadable, or does not match the trial (count or shapes).
nlohmann::json load(const std::string& dir, const Contents& contents);

// The checkpoint directories of a run, oldest first (by batch count).
std::vector<std::string> list(const std::string& run_dir);

}  // namespace crucible::checkpoint
