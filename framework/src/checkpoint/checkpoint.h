#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <crucible/errors.h>
#include <crucible/optim.h>
#include <crucible/trial.h>

#include "checkpoint/metadata.h"
#include "util/file_lock.h"

namespace crucible::checkpoint {

// Everything a checkpoint holds, by reference to the live objects.
//
// On disk a checkpoint is a directory <run>/checkpoints/batch-<NNNNNNNNNN>/:
//   model_<i>.pt       state dict of wrapped model i (torch.load-able from Python, also with
//                      weights_only=True)
//   model_<i>.safetensors  the same tensors in the safetensors format
//   optimizer_<i>.pt   state of wrapped optimizer i (torch::serialize archive)
//   trial_state.pt     the CPU and CUDA generators' states, Trial::save_state, each
//                      callback's save_state in a nested archive "callback_<name>", and each
//                      registered Part in a nested archive under its name
//   metadata.json      versions, trial class, hyperparameters, config, counters, validation
//                      metrics, each scheduler's state, trainer state, and the size and CRC-32 of
//                      every other file
// It is written into .tmp-batch-<N>/ beside it, fsynced, then renamed: a checkpoint directory
// either is complete or does not exist. <run>/latest names the newest one.
struct Contents;

// A named piece of state that a checkpoint carries besides the models, optimizers and
// schedulers: `save` writes it into a nested archive of trial_state.pt under `name`, `load` reads
// it back. Each callback is one ("callback_<name>"); a gradient scaler, a searcher's state or a
// metrics sink registers one with Contents::add_part, and save() and load() need no change.
struct Part {
  std::string name;
  std::function<void(torch::serialize::OutputArchive&)> save;
  std::function<void(torch::serialize::InputArchive&)> load;
};

struct Contents {
  std::vector<std::shared_ptr<torch::nn::Module>> models;
  std::vector<Optimizer> optimizers;
  std::vector<std::shared_ptr<LRScheduler>> schedulers;
  Callbacks callbacks;
  Trial* trial = nullptr;
  std::string trial_class;  // checked against metadata on load when not empty

  // Registers `part`, saved after the callbacks in registration order. Throws TrainingError when
  // its name is empty, starts with "callback_" (the callbacks' own), is "trial" (the archive of
  // Trial::save_state) or is registered already, or when save or load is missing.
  void add_part(Part part);
  // The parts registered with add_part, in registration order.
  const std::vector<Part>& parts() const { return parts_; }

 private:
  std::vector<Part> parts_;
};

// A checkpoint that fails verification: missing or unreadable metadata, a missing file, a size or
// checksum mismatch.
class DamagedCheckpoint : public TrainingError {
 public:
  using TrainingError::TrainingError;
};

// The folder of run `run_dir` that holds its checkpoints: <run_dir>/checkpoints.
std::string checkpoints_dir(const std::string& run_dir);

// The name of the checkpoint written after `batches` batches: batch-<batches, 10 digits>.
std::string directory_name(int64_t batches);

// The generator states of the ranks of a distributed run, indexed by rank: `cpu[r]` is rank r's
// CPU generator, and `cuda[r]`, when rank r computes on a GPU, its GPU's generator.
struct RankGenerators {
  std::vector<torch::Tensor> cpu;
  std::vector<torch::Tensor> cuda;
};

// The gradients that batches accumulated since the optimizers last stepped, for a checkpoint
// written inside a gradient-accumulation window: `by_rank[r][i]` is rank r's gradient of the i-th
// tensor of gradient_parameters() (undefined where it has none). Empty when no window is open.
struct AccumulatedGradients {
  std::vector<std::vector<torch::Tensor>> by_rank;
};

// The tensors whose gradients a checkpoint keeps: each model's parameters in order, then those of
// the optimizers that no model holds; each tensor once.
std::vector<torch::Tensor> gradient_parameters(const Contents& contents);

// Writes a checkpoint of `contents` as `<checkpoints_dir>/<directory_name(batches)>` and points
// `<run_dir>/latest` at it. `metadata` gets the fields save() knows (file list, counts, part
// names, scheduler steps) and is written as metadata.json. Throws
// TrainingError naming the path on any failure (a full disk included), after removing its
// temporary directory; existing checkpoints are never touched.
// `ranks`, when not empty, holds the generator states of every rank of a distributed run, saved
// beside the caller's own. The caller's CUDA generators are saved for every GPU it sees, and
// metadata gets "cuda_devices", their count. `gradients`, when not empty, is saved as
// gradients.pt.
std::string save(const std::string& run_dir, int64_t batches, const Contents& contents,
                 Metadata metadata, const RankGenerators& ranks = {},
                 const AccumulatedGradients& gradients = {});

// The metadata.json of checkpoint `dir`, without checking the other files. Throws
// DamagedCheckpoint when the directory or its metadata is missing or unreadable.
Metadata metadata(const std::string& dir);

// Checks every file of checkpoint `dir` against metadata.json; returns the metadata. Throws
// DamagedCheckpoint saying what is wrong.
Metadata verify(const std::string& dir);

// Verifies, then restores `contents` from checkpoint `dir`, pinned (pin()) while it reads, so that
// the run writing it, still training, does not delete it meanwhile; returns its metadata. Throws
// DamagedCheckpoint, or TrainingError when the checkpoint does not fit the trial (another trial
// class, other model or optimizer count, parameter names or shapes, other callback or part
// names), a part's load throws (naming the part) or a file cannot be read (naming it).
// An optimizer's state goes to the device of its parameters (when they share one; else to the
// devices it was saved from). `rank` picks this process's generator states when the checkpoint
// holds one per rank; `device`
// is the device this rank computes on. CUDA generators are restored only when the process sees
// as many GPUs as the writer did (metadata "cuda_devices"); otherwise they start afresh. When the
// checkpoint holds gradients.pt (written inside an accumulation window), every tensor of
// gradient_parameters() gets rank `rank`'s saved gradient, or none where it had none.
Metadata load(const std::string& dir, const Contents& contents, int64_t rank = 0,
              const torch::Device& device = torch::kCPU);

// Copies only the model weights of checkpoint `dir` into `models` (warm start), pinned as load()
// pins. Throws as load().
Metadata load_weights(const std::string& dir,
                      const std::vector<std::shared_ptr<torch::nn::Module>>& models);

// The checkpoint directories of a run, oldest first (by batch count).
std::vector<std::string> list(const std::string& run_dir);

// Deletes checkpoint `dir` and returns true (also when it is gone already), or, while a pin()
// holds it (another process, or this one, reading it), leaves it whole, asks for its deletion
// (a file `<dir>.to-delete` beside it) and returns false: the last pin released then deletes it.
// remove_unfinished() drops such requests, for the run's retention to decide again (a resume
// may keep more, or load the checkpoint). It is first renamed out of the names list()
// returns, so that another process reading the run (an experiment choosing its best checkpoint)
// finds it whole or not at all; a deletion cut short leaves a temporary directory that
// remove_unfinished() removes. Throws std::runtime_error naming the path on failure.
bool remove(const std::string& dir);

// What a log says of a checkpoint remove() left to its reader.
inline constexpr const char* kLeftToReader =
    "another process is reading it (trainer validate, predict or a warm start), and deletes it "
    "when done";

// A shared lock on a checkpoint (pin()) that keeps remove() from deleting it while the Pin lives,
// in any process.
class Pin {
 public:
  Pin(std::unique_ptr<util::FileLock> lock, std::string dir)
      : lock_(std::move(lock)), dir_(std::move(dir)) {}
  // Releases the lock; then deletes the checkpoint when remove() asked for that and no other pin
  // holds it. Never throws: one that cannot be carried out (a failed look-up or deletion) is
  // left, with a warning on stderr, to a later reader or to the run's retention after a resume.
  ~Pin();
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;

 private:
  std::unique_ptr<util::FileLock> lock_;
  std::string dir_;
};

// Pins checkpoint `dir`. Null when `dir` is no directory (it does not exist, or is a file) or
// was deleted before the lock took hold. Throws TrainingError naming `dir` and the cause when it
// cannot be opened, locked or looked up.
std::unique_ptr<Pin> pin(const std::string& dir);

// Removes the temporary directories of checkpoints whose writing (or deletion) was cut short (a
// killed process); returns their paths. Drops the deletions remove() asked for of checkpoints
// that pins held: the run's retention decides on them again. A temporary checkpoint that verifies
// and whose final name is free (a replacement cut short between removing the old one and renaming
// the new) is moved into place instead, and reported through `warn`. Only the process that owns the
// run may call it.
std::vector<std::string> remove_unfinished(
    const std::string& run_dir, const std::function<void(const std::string&)>& warn = {});

// The checkpoint name ("batch-<N>") that the run's file `latest` holds, or "" when the run has no
// such file. save() writes it last: it names the newest checkpoint written whole, which retention
// never deletes. Throws std::runtime_error naming the path and the cause when it cannot be read.
std::string latest_name(const std::string& run_dir);

// The newest checkpoint of the run that verifies and holds the batch its name says. Each damaged
// (or misnamed) newer one is reported through
// `warn` and skipped, and so is a `latest` that names a checkpoint no longer there. Throws
// TrainingError listing them when none verifies, and UsageError when the run has no checkpoint
// at all (naming the one `latest` names, when it does).
std::string newest_good(const std::string& run_dir,
                        const std::function<void(const std::string&)>& warn);

}  // namespace crucible::checkpoint
