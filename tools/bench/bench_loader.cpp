// bench_loader [--batches N] [--batch-size B] [--rounds R]
//
// What Crucible's DataLoader adds to a training step on the device `trainer fit` picks (CUDA
// device 0 when there is one, else the CPU), in one process. Every variant runs the same
// hand-written step of the bench MLP (bench_model.h: forward, cross-entropy, backward, SGD with
// momentum) on the same in-memory records; only how the batch reaches the device differs:
//   hand-written             index_select from the tensors, then .to(device) (pageable memory)
//   0 workers, set_device    the loader builds and pins the batch and copies it on the current
//                            stream (what `trainer fit` does with data.workers 0)
//   1 worker, set_device     a worker thread builds and pins; next() starts the following batch's
//                            copy on a side stream, with an event and record_stream per batch
//                            (what `trainer fit` does with data.workers 1)
//   1 worker, caller copies  a worker thread builds and pins (pin_memory, no set_device); the
//                            step copies the batch with .to(device, non_blocking) on the current
//                            stream, as a PyTorch loop does with pin_memory=True
//   0 workers, caller copies the same without the worker
// Rounds interleave the variants; each figure is the median over rounds of each round's median
// step time, with its ratio to the hand-written path. Rows that differ in one thing tell costs
// apart: the side stream's (the two 1-worker rows), the worker thread's (the two caller rows).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <torch/torch.h>

#include <crucible/data.h>

#include "bench_model.h"
#include "bench_util.h"

namespace {

enum class Feed { kHandWritten, kLoaderDevice, kLoaderCaller };

struct Variant {
  const char* name;
  Feed feed;
  int64_t workers;
};

constexpr Variant kVariants[] = {
    {"hand-written index_select + to(device)", Feed::kHandWritten, 0},
    {"DataLoader, 0 workers, set_device", Feed::kLoaderDevice, 0},
    {"DataLoader, 1 worker, set_device", Feed::kLoaderDevice, 1},
    {"DataLoader, 1 worker, caller copies", Feed::kLoaderCaller, 1},
    {"DataLoader, 0 workers, caller copies", Feed::kLoaderCaller, 0},
};

struct Run {
  int64_t batches = 2000;
  int64_t batch_size = 64;
  int64_t warmup = 20;
  torch::Device device = torch::kCPU;
};

// The median step time, in seconds, of `run.batches` steps (the first `run.warmup` left out) of
// the MLP fed by `variant` from the records `x`, `y`; the device has finished every step's work
// before it returns.
double median_step(const Variant& variant, const Run& run, const torch::Tensor& x,
                   const torch::Tensor& y) {
  torch::manual_seed(1);
  bench::MLP model;
  model->to(run.device);
  auto opt = bench::make_optimizer(model);
  const auto step = [&](const torch::Tensor& inputs, const torch::Tensor& labels) {
    auto loss = torch::nn::functional::cross_entropy(model->forward(inputs), labels);
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  bench::StepClock clock;
  if (variant.feed == Feed::kHandWritten) {
    bench::IndexSelectBatches batches({x, y}, run.batch_size, run.device);
    for (int64_t b = 0; b < run.batches; ++b) {
      clock.tick();
      const auto [inputs, labels] = batches.get(b);
      step(inputs, labels);
    }
  } else {
    crucible::DataLoader loader(
        std::make_shared<crucible::TensorDataset>(std::vector<torch::Tensor>{x, y}),
        crucible::DataLoaderOptions(run.batch_size)
            .shuffle(true)
            .num_workers(variant.workers)
            .pin_memory(run.device.is_cuda()));
    if (variant.feed == Feed::kLoaderDevice) loader.set_device(run.device);
    for (int64_t b = 0; b < run.batches; ++b) {
      clock.tick();
      crucible::Batch batch = loader.next();
      if (variant.feed == Feed::kLoaderCaller) batch = batch.to(run.device, /*non_blocking=*/true);
      step(batch[0], batch[1]);
    }
  }
  if (run.device.is_cuda()) torch::cuda::synchronize();
  clock.tick();
  return bench::median(clock.durations(static_cast<size_t>(run.warmup)));
}

}  // namespace

int main(int argc, char** argv) {
  Run run;
  int rounds = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--batches") {
      run.batches = std::stoll(argv[i + 1]);
    } else if (flag == "--batch-size") {
      run.batch_size = std::stoll(argv[i + 1]);
    } else if (flag == "--rounds") {
      rounds = std::stoi(argv[i + 1]);
    } else {
      std::cerr << "usage: bench_loader [--batches N] [--batch-size B] [--rounds R]\n";
      return 2;
    }
  }
  if (run.batches <= run.warmup + 1 || run.batch_size <= 0 || rounds <= 0 ||
      run.batch_size > bench::kRecords) {
    std::cerr << fmt::format(
        "bench_loader: needs more than {} batches, a batch size of 1 to {} and a round\n",
        run.warmup + 1, bench::kRecords);
    return 2;
  }
  if (torch::cuda::is_available()) run.device = torch::Device(torch::kCUDA, 0);
  const auto [x, y] = bench::make_data(1);
  std::vector<std::vector<double>> times(std::size(kVariants));
  for (int round = 0; round < rounds; ++round) {
    for (size_t v = 0; v < std::size(kVariants); ++v) {
      times[v].push_back(median_step(kVariants[v], run, x, y));
    }
  }
  fmt::print(
      "MLP 784-256-128-10, batch {}, {} steps ({} warm-up), {} rounds, {}, torch threads {}\n"
      "median over rounds of each round's median step time; ratio = time / hand-written\n",
      run.batch_size, run.batches, run.warmup, rounds,
      run.device.is_cuda() ? "CUDA device 0" : "CPU", torch::get_num_threads());
  const double hand = bench::median(times[0]);
  for (size_t v = 0; v < std::size(kVariants); ++v) {
    const double s = bench::median(times[v]);
    fmt::print("{:<42}{:>8.3f} ms/step   ratio {:.3f}\n", kVariants[v].name, s * 1e3, s / hand);
  }
  return 0;
}
