#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <torch/arg.h>

#include <crucible/batch.h>

namespace crucible {

// Inside Dataset::get and Dataset::get_batch called by a DataLoader: a CPU generator seeded from
// (loader seed, epoch, batch, and the rank when sharded) alone. Draw random augmentation from it
// and a run is reproducible and resumes exactly, whatever the number of loader threads. Outside a
// loader call it is another generator, the calling thread's own, seeded with 0 at its first use
// and never reseeded (nor saved in checkpoints); loader calls do not move it, whether they run
// on the caller's thread or on workers. Training code draws from LibTorch's default generator,
// which checkpoints save and restore.
torch::Generator& batch_generator();

// A finite, indexable source of examples. get() and get_batch() may be called concurrently from
// several loader threads, so they must not mutate shared state.
class Dataset {
 public:
  virtual ~Dataset() = default;
  // Number of examples.
  virtual int64_t size() const = 0;
  // Example `index`, 0 <= index < size().
  virtual Batch get(int64_t index) const = 0;
  // The examples at `indices`, collated. The default collates get() of each; an in-memory
  // dataset overrides it with one index_select per tensor.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const;
};

// A dataset over tensors that share their first dimension: example i is the i-th row of each.
// get_batch is a single index_select per tensor.
class TensorDataset : public Dataset {
 public:
  // Requires at least one tensor and equal sizes of dimension 0.
  explicit TensorDataset(std::vector<torch::Tensor> tensors);
  int64_t size() const override;
  Batch get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;

 private:
  std::vector<torch::Tensor> tensors_;
};

struct DataLoaderOptions {
  DataLoaderOptions() = default;
  explicit DataLoaderOptions(int64_t batch_size) : batch_size_(batch_size) {}

  // Examples per batch (> 0).
  TORCH_ARG(int64_t, batch_size) = 1;
  // Shuffle each epoch with a permutation drawn from (seed, epoch) alone.
  TORCH_ARG(bool, shuffle) = false;
  // Drop the last, incomplete batch of an epoch.
  TORCH_ARG(bool, drop_last) = false;
  // Background threads that build batches; 0 builds them on the caller's thread.
  TORCH_ARG(int64_t, num_workers) = 0;
  // The intra-op threads each worker runs the LibTorch operations of its batches on; 0: as many
  // as the process has (at::get_num_threads()). Under LibTorch's OpenMP build every thread's
  // parallel regions get a team of their own, so a worker with more than one competes with the
  // training step's team for the same cores; 1 is what PyTorch's DataLoader workers use.
  TORCH_ARG(int64_t, worker_threads) = 1;
  // Batches built ahead of the consumer when num_workers > 0; a value below 1 counts as 1.
  TORCH_ARG(int64_t, prefetch) = 2;
  // Seed of the shuffle and of batch_generator(). When unset, the trainer sets it from the trial
  // seed for the loaders it reads (training, validation, prediction); a loader used on its own
  // uses seed 0.
  TORCH_ARG(std::optional<uint64_t>, seed);
  // Put every batch's CPU tensors in page-locked memory as it is built (on the worker threads
  // when num_workers > 0), for asynchronous copies to a GPU. Requires CUDA at run time. The
  // trainer turns it on, through set_device, for the loaders it reads itself (training,
  // validation, prediction) on a rank that computes on a GPU.
  TORCH_ARG(bool, pin_memory) = false;
};

// How a loader divides its data among the ranks of a distributed run; the trainer sets it.
enum class ShardMode {
  kNone,           // every rank sees every batch
  kSplitBatches,   // a global batch is batch_size x world records; rank r takes the r-th slice
  kStrideBatches,  // rank r takes batches r, r + world, r + 2 world, ... of the unsharded order
};

// Where a loader stands: the next batch it yields is batch `batch` of epoch `epoch`.
struct DataPosition {
  int64_t epoch = 0;
  int64_t batch = 0;
  bool operator==(const DataPosition& o) const { return epoch == o.epoch && batch == o.batch; }
};

// Batches of a Dataset, in an order that is a pure function of (seed, epoch). The loader is an
// endless stream: next() moves to the following epoch after the last batch of one. Copies share
// the same underlying stream.
class DataLoader {
 public:
  // An empty loader: dataset() is null, and the trainer refuses it where a trial returns one.
  DataLoader();
  // A loader at position (0, 0). Throws crucible::Error when `dataset` is null, batch_size is
  // not positive, num_workers or worker_threads is negative, or the dataset's records make no
  // batch (none, or fewer than batch_size with drop_last).
  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options);
  ~DataLoader();

  const DataLoaderOptions& options() const;
  // Changes the shuffle seed; resets the position to (0, 0).
  void set_seed(uint64_t seed);
  // Turns pin_memory on or off for the batches built from now on (see DataLoaderOptions).
  void set_pin_memory(bool pin);
  // Yields every batch on `device` from now on (turning pin_memory on for CUDA). With
  // num_workers > 0, next() also takes the following batch of the same epoch from the workers,
  // when they have built it already, and starts its copy before returning, on a side stream on
  // CUDA, so that it travels while the caller computes; position() and the batches yielded are the
  // same as without a device, and an error building that batch is thrown by the next() that returns
  // it. The trainer sets the device of the training, validation and prediction loaders it reads; a
  // loader handed to a trial's evaluate_full_dataset keeps yielding CPU batches.
  void set_device(torch::Device device);
  // The dataset, or null for an empty loader.
  const std::shared_ptr<Dataset>& dataset() const;
  // Examples in the dataset.
  int64_t num_records() const;
  // Batches per epoch (drop_last taken into account).
  int64_t batches_per_epoch() const;

  // Makes this loader rank `rank`'s shard of `world` (resets the position to (0, 0)). Positions
  // and batches_per_epoch() then count this rank's batches. kSplitBatches: an epoch has
  // ceil(records / (batch_size x world)) batches (floor with drop_last); when the last global
  // batch is short, its records are split evenly and ranks short of records repeat records from
  // the start of the epoch's order, so every rank trains on the same number of batches.
  // kStrideBatches: every record once; ranks may have one batch fewer than others, and a rank
  // past the number of batches has none (iterating yields nothing; next() throws). Throws
  // crucible::Error when `rank` is not in [0, world), and for kSplitBatches when the records make
  // no global batch.
  void shard(int64_t rank, int64_t world, ShardMode mode);

  // Moves to `position` in O(1): nothing before it is read. Throws crucible::Error when the
  // position is negative or its batch is not below batches_per_epoch().
  void seek(DataPosition position);
  DataPosition position() const;
  // The batch at position(), then advances by one. Throws crucible::Error when this shard has no
  // batch.
  Batch next();

  // The dataset indices of batch `batch` of epoch `epoch`. Throws crucible::Error when this
  // shard's epochs have no such batch.
  std::vector<int64_t> batch_indices(int64_t epoch, int64_t batch) const;

  // Iterates the batches of the current epoch from position() to its end, e.g.
  // `for (Batch& b : loader)` over a fresh validation loader.
  class Iterator;
  Iterator begin();
  Iterator end();

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

class DataLoader::Iterator {
 public:
  Iterator(DataLoader* loader, int64_t epoch, bool at_end);
  Batch& operator*() { return current_; }
  Iterator& operator++();
  bool operator!=(const Iterator& other) const { return done_ != other.done_; }

 private:
  void fetch();
  DataLoader* loader_;
  int64_t epoch_;
  bool done_;
  Batch current_;
};

}  // namespace crucible
