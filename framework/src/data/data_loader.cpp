#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include <crucible/data.h>
#include <crucible/errors.h>

#include "data/device_stage.h"
#include "data/shuffle.h"
#include "util/crash_report.h"
#include "util/worker_threads.h"

namespace crucible {

// Background batch building. Sequence number s is the s-th batch after the position the pool
// started at; workers claim sequence numbers in order and build at most `prefetch` batches ahead
// of the consumer, who takes them strictly in order.
class BatchPool {
 public:
  using Build = std::function<Batch(int64_t seq)>;

  // Each of the `workers` threads runs LibTorch operations on `threads` intra-op threads (0: the
  // process's count).
  BatchPool(int64_t workers, int64_t threads, int64_t prefetch, Build build)
      : threads_each_(threads),
        prefetch_(std::max<int64_t>(1, prefetch)),
        build_(std::move(build)) {
    for (int64_t i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  }
  ~BatchPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

  Batch take() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return ready_.count(consumed_) > 0; });
    auto node = ready_.extract(consumed_);
    ++consumed_;
    lock.unlock();
    cv_.notify_all();
    if (node.mapped().error) std::rethrow_exception(node.mapped().error);
    return std::move(node.mapped().batch);
  }

  // Whether the batch take() returns next is built (take() would not wait).
  bool ready() {
    std::lock_guard<std::mutex> lock(mu_);
    return ready_.count(consumed_) > 0;
  }

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };

  void work() {
    if (threads_each_ > 0) util::use_intra_op_threads_here(static_cast<int>(threads_each_));
    for (;;) {
      int64_t seq;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || claimed_ < consumed_ + prefetch_; });
        if (stop_) return;
        seq = claimed_++;
      }
      Slot slot;
      try {
        slot.batch = build_(seq);
      } catch (...) {
        slot.error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        ready_.emplace(seq, std::move(slot));
      }
      cv_.notify_all();
    }
  }

  const int64_t threads_each_;
  const int64_t prefetch_;
  Build build_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t claimed_ = 0;
  int64_t consumed_ = 0;
  std::map<int64_t, Slot> ready_;
  std::vector<std::thread> threads_;
};

namespace {

// The generator of the loader call this thread is in (reseeded for each batch), and the one it
// gives outside loader calls (seeded with 0 once, never reseeded).
at::Generator& loader_call_generator() {
  thread_local at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(0);
  return generator;
}
at::Generator& outside_generator() {
  thread_local at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(0);
  return generator;
}
thread_local bool in_loader_call = false;

// Marks this thread as inside a loader call, with its generator seeded with `seed`, for the
// scope's lifetime. A call inside another (a dataset reading from a loader of its own on the same
// thread) gives the outer call its generator back as the inner one found it.
class LoaderCall {
 public:
  explicit LoaderCall(uint64_t seed) : outer_(in_loader_call) {
    if (outer_) outer_state_ = loader_call_generator().get_state();
    loader_call_generator().set_current_seed(seed);
    in_loader_call = true;
  }
  ~LoaderCall() {
    if (outer_) loader_call_generator().set_state(outer_state_);
    in_loader_call = outer_;
  }
  LoaderCall(const LoaderCall&) = delete;
  LoaderCall& operator=(const LoaderCall&) = delete;

 private:
  bool outer_;
  at::Tensor outer_state_;
};

}  // namespace

torch::Generator& batch_generator() {
  return in_loader_call ? loader_call_generator() : outside_generator();
}

struct DataLoader::Impl {
  std::shared_ptr<Dataset> dataset;
  DataLoaderOptions options;
  DataPosition position;
  std::mutex perm_mu;
  std::map<int64_t, std::shared_ptr<const std::vector<int64_t>>> perms;  // by epoch, last few
  std::optional<data::DeviceStage> stage;  // set_device; holds the batch at `position`
  std::unique_ptr<BatchPool> pool;         // last: its threads use the members above

  ~Impl() { pool.reset(); }

  // Forgets batches built or moved ahead of `position`; the next one starts there.
  void restart() {
    pool.reset();
    if (stage) stage->clear();
  }

  // The host batch at `p`, which must be the position after the last one taken (or a position
  // just restarted at).
  Batch take_host(DataPosition p) {
    if (options.num_workers() == 0) return build(p);
    if (!pool) {
      pool = std::make_unique<BatchPool>(options.num_workers(), options.worker_threads(),
                                         options.prefetch(),
                                         [this, p](int64_t seq) { return build(advance(p, seq)); });
    }
    return pool->take();
  }

  // Takes the host batch at `p` and starts moving it to the device; an error is kept for the
  // next() that asks for `p`.
  void stage_ahead(DataPosition p) {
    try {
      stage->start(take_host(p));
    } catch (...) {
      stage->fail(std::current_exception());
    }
  }

  int64_t rank = 0;
  int64_t world = 1;
  ShardMode shard_mode = ShardMode::kNone;

  // Batches of the unsharded order of batch size `bs`.
  int64_t whole_batches(int64_t bs) const {
    const int64_t n = dataset->size();
    return options.drop_last() ? n / bs : (n + bs - 1) / bs;
  }

  int64_t batches_per_epoch() const {
    switch (shard_mode) {
      case ShardMode::kSplitBatches:
        return whole_batches(options.batch_size() * world);
      case ShardMode::kStrideBatches: {
        const int64_t all = whole_batches(options.batch_size());
        return all / world + (rank < all % world ? 1 : 0);
      }
      case ShardMode::kNone:
        break;
    }
    return whole_batches(options.batch_size());
  }

  DataPosition advance(DataPosition p, int64_t steps) const {
    const int64_t bpe = batches_per_epoch();
    const int64_t flat = p.batch + steps;
    return {p.epoch + flat / bpe, flat % bpe};
  }

  std::shared_ptr<const std::vector<int64_t>> permutation(int64_t epoch) {
    std::lock_guard<std::mutex> lock(perm_mu);
    auto it = perms.find(epoch);
    if (it != perms.end()) return it->second;
    auto p = std::make_shared<const std::vector<int64_t>>(
        data::permutation(dataset->size(), options.seed().value_or(0), epoch));
    perms[epoch] = p;
    while (perms.size() > 3) perms.erase(perms.begin());
    return p;
  }

  // Positions [start, end) of the epoch's order of records, as dataset indices; positions past
  // the end wrap around to its start.
  std::vector<int64_t> at_positions(int64_t epoch, int64_t start, int64_t end) {
    const int64_t n = dataset->size();
    std::vector<int64_t> out;
    out.reserve(static_cast<size_t>(end - start));
    std::shared_ptr<const std::vector<int64_t>> perm;
    if (options.shuffle()) perm = permutation(epoch);
    for (int64_t i = start; i < end; ++i) {
      const int64_t p = i % n;
      out.push_back(perm ? (*perm)[static_cast<size_t>(p)] : p);
    }
    return out;
  }

  std::vector<int64_t> indices(int64_t epoch, int64_t batch) {
    const int64_t n = dataset->size();
    const int64_t bs = options.batch_size();
    if (shard_mode == ShardMode::kStrideBatches) batch = batch * world + rank;
    if (shard_mode != ShardMode::kSplitBatches) {
      const int64_t start = batch * bs;
      return at_positions(epoch, start, std::min(n, start + bs));
    }
    const int64_t global_start = batch * bs * world;
    const int64_t records = std::min(n - global_start, bs * world);
    const int64_t share = records == bs * world ? bs : (records + world - 1) / world;
    const int64_t start = global_start + rank * share;
    return at_positions(epoch, start, start + share);
  }

  Batch build(DataPosition p) {
    uint64_t seed = data::mix64(options.seed().value_or(0) ^
                                data::mix64(static_cast<uint64_t>(p.epoch) * 0x100000001B3ULL +
                                            static_cast<uint64_t>(p.batch)));
    if (shard_mode != ShardMode::kNone) seed = data::mix64(seed ^ static_cast<uint64_t>(rank + 1));
    const LoaderCall loader_call(seed);
    const util::CrashScope crash_scope("in the dataset's get_batch", "batch", p.batch, p.epoch);
    Batch batch = dataset->get_batch(indices(p.epoch, p.batch));
    return options.pin_memory() ? batch.pin_memory() : batch;
  }
};

DataLoader::DataLoader() = default;

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : impl_(std::make_shared<Impl>()) {
  if (!dataset) throw Error("DataLoader: the dataset is null");
  if (options.batch_size() <= 0) {
    throw Error(
        fmt::format("DataLoader: batch_size must be positive, got {}", options.batch_size()));
  }
  if (options.num_workers() < 0) throw Error("DataLoader: num_workers must not be negative");
  if (options.worker_threads() < 0) {
    throw Error("DataLoader: worker_threads must not be negative");
  }
  impl_->dataset = std::move(dataset);
  impl_->options = options;
  if (impl_->batches_per_epoch() == 0) {
    throw Error(fmt::format("DataLoader: {} records make no batch of {}{}", impl_->dataset->size(),
                            options.batch_size(), options.drop_last() ? " with drop_last" : ""));
  }
}

DataLoader::~DataLoader() = default;

const DataLoaderOptions& DataLoader::options() const { return impl_->options; }

void DataLoader::set_seed(uint64_t seed) {
  impl_->restart();
  impl_->options.seed(seed);
  std::lock_guard<std::mutex> lock(impl_->perm_mu);
  impl_->perms.clear();
  impl_->position = {};
}

void DataLoader::set_pin_memory(bool pin) {
  impl_->restart();  // rebuilt at the current position by the next batch
  impl_->options.pin_memory(pin);
}

void DataLoader::set_device(torch::Device device) {
  impl_->restart();
  impl_->stage.emplace(device);
  if (device.is_cuda()) impl_->options.pin_memory(true);
}

const std::shared_ptr<Dataset>& DataLoader::dataset() const {
  static const std::shared_ptr<Dataset> none;
  return impl_ ? impl_->dataset : none;
}

void DataLoader::shard(int64_t rank, int64_t world, ShardMode mode) {
  if (world < 1 || rank < 0 || rank >= world) {
    throw Error(fmt::format("DataLoader: cannot shard as rank {} of {}", rank, world));
  }
  impl_->restart();
  impl_->rank = rank;
  impl_->world = world;
  impl_->shard_mode = world == 1 ? ShardMode::kNone : mode;
  impl_->position = {};
  if (batches_per_epoch() == 0 && mode == ShardMode::kSplitBatches) {
    throw Error(fmt::format("DataLoader: {} records make no global batch of {} x {} ranks",
                            num_records(), impl_->options.batch_size(), world));
  }
}

int64_t DataLoader::num_records() const { return impl_->dataset->size(); }

int64_t DataLoader::batches_per_epoch() const { return impl_->batches_per_epoch(); }

void DataLoader::seek(DataPosition position) {
  if (position.epoch < 0 || position.batch < 0 || position.batch >= batches_per_epoch()) {
    throw Error(fmt::format("DataLoader: cannot seek to epoch {} batch {} ({} batches per epoch)",
                            position.epoch, position.batch, batches_per_epoch()));
  }
  impl_->restart();
  impl_->position = position;
}

DataPosition DataLoader::position() const { return impl_->position; }

Batch DataLoader::next() {
  Impl& impl = *impl_;
  if (impl.batches_per_epoch() == 0) {
    throw Error(
        fmt::format("DataLoader: rank {} of {} has no batch: {} records make {} batches of {}",
                    impl.rank, impl.world, num_records(),
                    impl.whole_batches(impl.options.batch_size()), impl.options.batch_size()));
  }
  const DataPosition current = impl.position;
  impl.position = impl.advance(current, 1);
  if (!impl.stage) return impl.take_host(current);
  // When the workers have already built the batch after this one in the same epoch, it is taken
  // now and its copy started (the stage then holds the batch at `position`). Waiting for it here
  // would undo the overlap of building with the caller's work; building it on the caller's
  // thread would only move the build earlier.
  Batch batch =
      impl.stage->holding() ? impl.stage->take() : impl.stage->place(impl.take_host(current));
  if (impl.pool && impl.pool->ready() && impl.position.epoch == current.epoch) {
    impl.stage_ahead(impl.position);
  }
  return batch;
}

std::vector<int64_t> DataLoader::batch_indices(int64_t epoch, int64_t batch) const {
  if (epoch < 0 || batch < 0 || batch >= batches_per_epoch()) {
    throw Error(fmt::format("DataLoader: no batch {} in epoch {} ({} batches per epoch)", batch,
                            epoch, batches_per_epoch()));
  }
  return impl_->indices(epoch, batch);
}

DataLoader::Iterator DataLoader::begin() { return Iterator(this, position().epoch, false); }

DataLoader::Iterator DataLoader::end() { return Iterator(this, position().epoch, true); }

DataLoader::Iterator::Iterator(DataLoader* loader, int64_t epoch, bool at_end)
    : loader_(loader), epoch_(epoch), done_(at_end) {
  if (!done_) fetch();
}

void DataLoader::Iterator::fetch() {
  if (loader_->batches_per_epoch() == 0 || loader_->position().epoch != epoch_) {
    done_ = true;
    current_ = Batch();
    return;
  }
  current_ = loader_->next();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  fetch();
  return *this;
}

}  // namespace crucible
