#include <chrono>
#include <set>
#include <thread>

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include "catch.h"

#include <crucible/data.h>
#include <crucible/errors.h>

#include "data/shuffle.h"

using crucible::Batch;
using crucible::DataLoader;
using crucible::DataLoaderOptions;
using crucible::DataPosition;

namespace {

std::shared_ptr<crucible::TensorDataset> indices_dataset(int64_t n) {
  return std::make_shared<crucible::TensorDataset>(
      std::vector<torch::Tensor>{torch::arange(n), torch::arange(n) * 10});
}

std::vector<int64_t> ids(const Batch& b) {
  auto t = b[0].tensor();
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

// A dataset without get_batch: the loader collates get() results.
class ExampleDataset : public crucible::Dataset {
 public:
  int64_t size() const override { return 10; }
  Batch get(int64_t i) const override {
    return Batch::dict({{"x", torch::full({2}, static_cast<float>(i))}, {"i", torch::tensor(i)}});
  }
};

// Records 0..size-1 as scalar tensors, except record `bad`, whose read throws.
class BrokenDataset : public crucible::Dataset {
 public:
  BrokenDataset(int64_t size, int64_t bad) : size_(size), bad_(bad) {}
  int64_t size() const override { return size_; }
  Batch get(int64_t i) const override {
    if (i == bad_) throw std::runtime_error(fmt::format("bad record {}", i));
    return torch::tensor(i);
  }

 private:
  int64_t size_, bad_;
};

// Records i as its first field and, as its second, a draw from batch_generator().
class DrawingDataset : public crucible::Dataset {
 public:
  int64_t size() const override { return 8; }
  Batch get(int64_t i) const override {
    return Batch{torch::tensor(i), torch::rand({1}, crucible::batch_generator())};
  }
};

// Draws twice from batch_generator(), reading a batch of a loader of its own in between when
// `nested`.
class TwoDrawDataset : public crucible::Dataset {
 public:
  explicit TwoDrawDataset(bool nested) : nested_(nested) {}
  int64_t size() const override { return 4; }
  Batch get(int64_t) const override {
    const torch::Tensor first = torch::rand({2}, crucible::batch_generator());
    if (nested_) {
      DataLoader(std::make_shared<DrawingDataset>(), DataLoaderOptions(2).seed(9)).next();
    }
    return Batch{first, torch::rand({2}, crucible::batch_generator())};
  }

 private:
  bool nested_;
};

// Records, as its only field, the intra-op thread count that the thread reading it has.
class ThreadCountDataset : public crucible::Dataset {
 public:
  int64_t size() const override { return 8; }
  Batch get(int64_t) const override { return torch::tensor(int64_t{at::get_num_threads()}); }
};

}  // namespace

TEST_CASE("the permutation depends on (seed, epoch) alone", "[data]") {
  using crucible::data::permutation;
  CHECK(permutation(1000, 5, 3) == permutation(1000, 5, 3));
  CHECK(permutation(1000, 5, 3) != permutation(1000, 5, 4));
  CHECK(permutation(1000, 5, 3) != permutation(1000, 6, 3));
  auto p = permutation(1000, 1, 0);
  CHECK(std::set<int64_t>(p.begin(), p.end()).size() == 1000);
  // Pinned values: a change of the shuffle algorithm changes every run's data order.
  CHECK(permutation(8, 42, 0) == std::vector<int64_t>{5, 7, 0, 2, 6, 3, 4, 1});
  CHECK(permutation(8, 42, 1) == std::vector<int64_t>{7, 2, 4, 6, 5, 1, 0, 3});
  auto a = DataLoader(indices_dataset(100), DataLoaderOptions(10).shuffle(true).seed(9));
  auto b = DataLoader(indices_dataset(100), DataLoaderOptions(10).shuffle(true).seed(9));
  for (int i = 0; i < 25; ++i) CHECK(ids(a.next()) == ids(b.next()));
  // Seed 0 is a seed like any other; only an unset seed is filled in by the trainer, and a
  // loader used on its own shuffles unset as with 0.
  CHECK_FALSE(DataLoaderOptions(10).seed().has_value());
  auto unset = DataLoader(indices_dataset(100), DataLoaderOptions(10).shuffle(true));
  auto zero = DataLoader(indices_dataset(100), DataLoaderOptions(10).shuffle(true).seed(0));
  CHECK(zero.options().seed() == std::optional<uint64_t>(0));
  for (int i = 0; i < 10; ++i) CHECK(ids(unset.next()) == ids(zero.next()));
}

TEST_CASE("every epoch visits each record once, in a new order", "[data]") {
  DataLoader loader(indices_dataset(100), DataLoaderOptions(8).shuffle(true).seed(3));
  CHECK(loader.batches_per_epoch() == 13);
  std::vector<int64_t> epoch0, epoch1;
  for (int i = 0; i < 13; ++i) {
    auto v = ids(loader.next());
    epoch0.insert(epoch0.end(), v.begin(), v.end());
  }
  CHECK(loader.position() == DataPosition{1, 0});
  for (int i = 0; i < 13; ++i) {
    auto v = ids(loader.next());
    epoch1.insert(epoch1.end(), v.begin(), v.end());
  }
  CHECK(epoch0.size() == 100);
  CHECK(std::set<int64_t>(epoch0.begin(), epoch0.end()).size() == 100);
  CHECK(std::set<int64_t>(epoch1.begin(), epoch1.end()).size() == 100);
  CHECK(epoch0 != epoch1);
}

TEST_CASE("drop_last drops the incomplete batch: otherwise it is kept", "[data]") {
  DataLoader keep(indices_dataset(10), DataLoaderOptions(4));
  DataLoader drop(indices_dataset(10), DataLoaderOptions(4).drop_last(true));
  CHECK(keep.batches_per_epoch() == 3);
  CHECK(drop.batches_per_epoch() == 2);
  keep.seek({0, 2});
  CHECK(ids(keep.next()) == std::vector<int64_t>{8, 9});
  drop.seek({0, 1});
  CHECK(ids(drop.next()) == std::vector<int64_t>{4, 5, 6, 7});
  CHECK(ids(drop.next()) == std::vector<int64_t>{0, 1, 2, 3});  // the next epoch
  CHECK_THROWS_AS(DataLoader(indices_dataset(3), DataLoaderOptions(4).drop_last(true)),
                  crucible::Error);
}

TEST_CASE("seek restores a position in O(1) and matches sequential reading", "[data]") {
  auto options = DataLoaderOptions(7).shuffle(true).seed(11);
  DataLoader sequential(indices_dataset(50), options);
  std::vector<std::vector<int64_t>> seen;
  for (int i = 0; i < 30; ++i) seen.push_back(ids(sequential.next()));
  for (int start : {0, 5, 7, 8, 20, 29}) {
    DataLoader resumed(indices_dataset(50), options);
    resumed.seek({start / 8, start % 8});
    for (int i = start; i < 30; ++i) {
      INFO("start " << start << " batch " << i);
      CHECK(ids(resumed.next()) == seen[i]);
    }
  }
  DataLoader loader(indices_dataset(50), options);
  CHECK_THROWS_WITH(loader.seek({0, 8}), Catch::Contains("cannot seek to epoch 0 batch 8"));
}

TEST_CASE("worker threads yield exactly the single-threaded sequence", "[data]") {
  auto base = DataLoaderOptions(6).shuffle(true).seed(21);
  DataLoader single(indices_dataset(100), base);
  DataLoader threaded(indices_dataset(100), DataLoaderOptions(base).num_workers(3).prefetch(4));
  for (int i = 0; i < 60; ++i) CHECK(ids(single.next()) == ids(threaded.next()));
  threaded.seek({2, 3});
  single.seek({2, 3});
  for (int i = 0; i < 10; ++i) CHECK(ids(single.next()) == ids(threaded.next()));
}

TEST_CASE("a loader worker runs LibTorch operations on worker_threads threads, 1 by default",
          "[data]") {
  // Under LibTorch's OpenMP build each thread's parallel regions get a team of their own.
  if (at::get_parallel_info().find("parallel backend: OpenMP") == std::string::npos) return;
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  // {worker_threads, the count a worker has}; 0 leaves the process's.
  for (const auto& [threads, expected] : {std::pair{-1, 1}, std::pair{0, 2}, std::pair{3, 3}}) {
    INFO("worker_threads " << threads);
    auto options = DataLoaderOptions(4).num_workers(2);
    if (threads >= 0) options.worker_threads(threads);
    DataLoader loader(std::make_shared<ThreadCountDataset>(), options);
    for (int i = 0; i < 2; ++i) {
      CHECK(torch::equal(loader.next().tensor(), torch::full({4}, expected, torch::kLong)));
    }
  }
  CHECK(at::get_num_threads() == 2);
  CHECK_THROWS_WITH(DataLoader(std::make_shared<ThreadCountDataset>(),
                               DataLoaderOptions(4).num_workers(1).worker_threads(-1)),
                    Catch::Contains("worker_threads must not be negative"));
  at::set_num_threads(before);
}

TEST_CASE("an exception in a worker reaches the consumer", "[data]") {
  DataLoader loader(std::make_shared<BrokenDataset>(10, 7), DataLoaderOptions(5).num_workers(2));
  CHECK_NOTHROW(loader.next());
  CHECK_THROWS_WITH(loader.next(), Catch::Contains("bad record 7"));
}

TEST_CASE("a loader with a device yields the same batches and positions as one without", "[data]") {
  const auto options = DataLoaderOptions(6).shuffle(true).seed(5).num_workers(2).prefetch(3);
  for (int64_t workers : {0, 2}) {
    DataLoader plain(indices_dataset(40), DataLoaderOptions(options).num_workers(workers));
    DataLoader placed(indices_dataset(40), DataLoaderOptions(options).num_workers(workers));
    placed.set_device(torch::kCPU);
    // 7 batches per epoch: the reads cross two epoch ends.
    for (int i = 0; i < 17; ++i) {
      INFO("workers " << workers << " batch " << i);
      CHECK(ids(placed.next()) == ids(plain.next()));
      CHECK(placed.position() == plain.position());
    }
    // A seek drops the batch taken ahead of the old position.
    placed.seek({0, 3});
    plain.seek({0, 3});
    for (int i = 0; i < 5; ++i) CHECK(ids(placed.next()) == ids(plain.next()));
    CHECK(placed.position() == DataPosition{1, 1});
  }
}

TEST_CASE("a batch taken ahead that fails throws from the next() that returns it", "[data]") {
  DataLoader loader(std::make_shared<BrokenDataset>(25, 12),
                    DataLoaderOptions(5).num_workers(2).prefetch(3));
  loader.set_device(torch::kCPU);
  CHECK(loader.next().tensor().equal(torch::arange(5)));
  // Time for the workers to build batches 1..3 (batch 2, records 10..14, fails), so that the
  // next() below takes batch 2 ahead, as the failure it is.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(loader.next().tensor().equal(torch::arange(5, 10)));
  CHECK_THROWS_WITH(loader.next(), Catch::Contains("bad record 12"));
  CHECK(loader.position() == DataPosition{0, 3});
  CHECK(loader.next().tensor().equal(torch::arange(15, 20)));
}

TEST_CASE("a dataset without get_batch is collated example by example", "[data]") {
  DataLoader loader(std::make_shared<ExampleDataset>(), DataLoaderOptions(4));
  Batch b = loader.next();
  CHECK(b["x"].tensor().sizes() == std::vector<int64_t>{4, 2});
  CHECK(b["i"].tensor().equal(torch::arange(4)));
}

TEST_CASE("range-for iterates the rest of the current epoch", "[data]") {
  DataLoader loader(indices_dataset(10), DataLoaderOptions(3));
  int batches = 0;
  int64_t records = 0;
  for (Batch& b : loader) {
    ++batches;
    records += b[0].tensor().size(0);
  }
  CHECK(batches == 4);
  CHECK(records == 10);
  CHECK(loader.position() == DataPosition{1, 0});
}

TEST_CASE("batch_indices refuses a batch the epochs do not have", "[data]") {
  DataLoader loader(indices_dataset(50), DataLoaderOptions(7));
  CHECK(loader.batch_indices(3, 7) == std::vector<int64_t>{49});
  CHECK_THROWS_WITH(loader.batch_indices(0, 8),
                    Catch::Contains("no batch 8 in epoch 0 (8 batches per epoch)"));
  CHECK_THROWS_AS(loader.batch_indices(-1, 0), crucible::Error);
  CHECK_THROWS_AS(loader.batch_indices(0, -1), crucible::Error);
  CHECK(DataLoader().dataset() == nullptr);
}

TEST_CASE("outside the loader's calls batch_generator is the thread's own, which they leave alone",
          "[data]") {
  // Two draws on a new thread, with or without batches read between them (there, or on workers).
  const auto draws = [](int64_t workers, bool read) {
    std::vector<torch::Tensor> out;
    std::vector<torch::Tensor> inside;
    std::thread([&] {
      DataLoader loader(std::make_shared<DrawingDataset>(),
                        DataLoaderOptions(2).num_workers(workers).seed(3));
      out.push_back(torch::rand({4}, crucible::batch_generator()));
      for (int i = 0; read && i < 3; ++i) inside.push_back(loader.next()[1].tensor());
      out.push_back(torch::rand({4}, crucible::batch_generator()));
    }).join();
    out.insert(out.end(), inside.begin(), inside.end());
    return out;
  };
  const auto alone = draws(0, false);
  const auto on_caller = draws(0, true);
  const auto on_workers = draws(2, true);
  REQUIRE(on_caller.size() == 5);
  for (size_t i = 0; i < on_caller.size(); ++i) {
    INFO("draw " << i);
    if (i < 2) CHECK(torch::equal(on_caller[i], alone[i]));
    // The draws inside the loader's calls are the same on the caller's thread and on workers.
    CHECK(torch::equal(on_workers[i], on_caller[i]));
  }
  // A loader read inside a loader call, on the same thread, leaves the outer call's draws alone.
  DataLoader plain(std::make_shared<TwoDrawDataset>(false), DataLoaderOptions(2).seed(4));
  DataLoader nesting(std::make_shared<TwoDrawDataset>(true), DataLoaderOptions(2).seed(4));
  const Batch a = plain.next();
  const Batch b = nesting.next();
  CHECK(torch::equal(a[0].tensor(), b[0].tensor()));
  CHECK(torch::equal(a[1].tensor(), b[1].tensor()));
}

TEST_CASE("a TensorDataset builds its batches on its tensors' device: the CPU, and a GPU if any",
          "[data]") {
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available()) devices.emplace_back(torch::kCUDA, 0);
  for (const auto& device : devices) {
    INFO(device);
    const auto on = torch::TensorOptions().device(device);
    DataLoader loader(std::make_shared<crucible::TensorDataset>(std::vector<torch::Tensor>{
                          torch::arange(10, on), torch::arange(10, on) * 10}),
                      DataLoaderOptions(4).shuffle(true).seed(1));
    const std::vector<int64_t> expected = loader.batch_indices(0, 0);
    const Batch batch = loader.next();
    CHECK(batch[0].tensor().device() == device);
    const torch::Tensor ids = batch[0].tensor().cpu();
    CHECK(std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel()) ==
          expected);
    CHECK(torch::equal(batch[1].tensor(), batch[0].tensor() * 10));
  }
}
