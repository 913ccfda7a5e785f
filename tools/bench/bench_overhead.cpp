// bench_overhead [--batches N] [--batch-size B] [--rounds R] [--python PYTHON] [--table FILE]
//
// Median step time of one MLP training step (a) through `trainer fit` with the bench_mlp trial,
// (b) in a hand-written LibTorch loop doing the same work, (c) in Python PyTorch when a Python
// with torch is available; all three on the device `trainer fit` picks (CUDA device 0 when
// there is one, else the CPU), each in a process of its own with the same OMP_NUM_THREADS
// (LibTorch's intra-op thread count unless set). `trainer fit` runs with 0 and 1 loader workers,
// with 1 worker on as many intra-op threads as the process (worker_threads 0) instead of its
// default 1, and with its batches made in train_batch as the hand-written loop makes them
// (hparam loop_data: only 9 bytes a record travel the trainer's data path). Prints each median
// and the ratios to the hand-written loop, and appends the table rows to FILE (bench_all).
#include <unistd.h>

#include <iostream>
#include <tuple>

#include <fmt/format.h>

#include "bench_model.h"
#include "bench_util.h"

namespace {

using bench::capture;
using bench::median;
using bench::read_numbers;

torch::Device bench_device() {
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
}

// The hand-written loop (this program with --loop); prints its step times.
int hand_written(int64_t batches, int64_t batch_size, int64_t warmup) {
  torch::manual_seed(1);
  const torch::Device device = bench_device();
  bench::MLP model;
  model->to(device);
  auto opt = bench::make_optimizer(model);
  bench::IndexSelectBatches data(bench::make_data(1), batch_size, device);
  bench::StepClock clock;
  for (int64_t b = 0; b < batches; ++b) {
    clock.tick();
    const auto [x, y] = data.get(b);
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  for (double d : clock.durations(static_cast<size_t>(warmup))) fmt::print("{}\n", d);
  return 0;
}

// Median step time of `command`, which prints one per line; 0 when it fails.
double median_step(const std::string& command) {
  int rc = 0;
  const std::string out = capture(command + " 2>/dev/null", &rc);
  return rc == 0 ? median(read_numbers(out)) : 0;
}

// Runs `trainer fit` on the bench trial with `workers` loader workers of `worker_threads`
// intra-op threads each (DataLoaderOptions), its batches made in train_batch when `loop_data`;
// stores the median step time in *median_s.
bool trainer_steps(int64_t batches, int64_t batch_size, int64_t warmup, int workers,
                   int worker_threads, bool loop_data, double* median_s) {
  const std::string timing = fmt::format("/tmp/crucible_bench_steps_{}.txt", getpid());
  try {
    bench::fit_bench_mlp(
        "",
        fmt::format("--set max_length.batches={} "
                    "--set hyperparameters.global_batch_size={} "
                    "--set hyperparameters.warmup={} --set hyperparameters.workers={} "
                    "--set hyperparameters.worker_threads={} "
                    "--set hyperparameters.loop_data={}",
                    batches, batch_size, warmup, workers, worker_threads, loop_data),
        timing);
  } catch (const std::exception& e) {
    std::cerr << e.what();
    return false;
  }
  *median_s = bench::median_of_file(timing);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--loop") {
    return hand_written(std::stoll(argv[2]), std::stoll(argv[3]), std::stoll(argv[4]));
  }
  int64_t batches = 2000, batch_size = 64, warmup = 20;
  int rounds = 5;
  std::string python = "/usr/bin/python3", table;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--batches")
      batches = std::stoll(argv[i + 1]);
    else if (flag == "--batch-size")
      batch_size = std::stoll(argv[i + 1]);
    else if (flag == "--python")
      python = argv[i + 1];
    else if (flag == "--rounds")
      rounds = std::stoi(argv[i + 1]);
    else if (flag == "--table")
      table = argv[i + 1];
    else {
      std::cerr << "usage: bench_overhead [--batches N] [--batch-size B] [--rounds R] "
                   "[--python PYTHON] [--table FILE]\n";
      return 2;
    }
  }
  const std::string threads = bench::pin_threads(torch::get_num_threads());
  // Rounds interleave the variants so that drift of the machine hits all of them alike.
  std::vector<double> hand, fit0, fit1, fit1_shared, fit_loop_data, py;
  for (int round = 0; round < rounds; ++round) {
    const double h = median_step(fmt::format("{} --loop {} {} {}",
                                             crucible::util::read_symlink("/proc/self/exe"),
                                             batches, batch_size, warmup));
    if (h == 0) {
      std::cerr << "the hand-written loop failed\n";
      return 1;
    }
    hand.push_back(h);
    // {workers, worker_threads, loop_data, where the step time goes}; worker_threads 0: the
    // process's.
    for (const auto& [workers, threads, loop_data, times] :
         {std::tuple{0, 1, false, &fit0}, std::tuple{1, 1, false, &fit1},
          std::tuple{1, 0, false, &fit1_shared}, std::tuple{0, 1, true, &fit_loop_data}}) {
      double s = 0;
      if (!trainer_steps(batches, batch_size, warmup, workers, threads, loop_data, &s)) return 1;
      times->push_back(s);
    }
    const double p = median_step(fmt::format("{} {}/overhead_pytorch.py {} {} {}", python,
                                             CRUCIBLE_BENCH_DIR, batches, batch_size, warmup));
    if (p > 0) py.push_back(p);
  }
  const double hand_s = median(hand);
  const torch::Device device = bench_device();
  fmt::print(
      "MLP 784-256-128-10, batch {}, {} steps ({} warm-up), {} rounds, {}, "
      "OMP_NUM_THREADS={}\n",
      batch_size, batches, warmup, rounds, device.is_cuda() ? "CUDA device 0" : "CPU", threads);
  fmt::print("median over rounds of each round's median step time; ratio = time / hand-written\n");
  auto row = [&](const std::string& name, const std::vector<double>& v) {
    fmt::print("{:<38} {:>8.3f} ms/step   ratio {:.3f}\n", name, median(v) * 1e3,
               median(v) / hand_s);
  };
  row("hand-written LibTorch loop", hand);
  row("Crucible trainer fit, 0 loader workers", fit0);
  row("Crucible trainer fit, 1 loader worker", fit1);
  row(fmt::format("  the same, worker on {} threads", threads), fit1_shared);
  row("  0 workers, batches made as the loop's", fit_loop_data);
  const bool with_python = py.size() == static_cast<size_t>(rounds);
  if (with_python) {
    row("Python PyTorch loop", py);
  } else {
    fmt::print("Python PyTorch loop: skipped ({} has no torch; apt-get install python3-torch)\n",
               python);
  }

  const std::string measure = fmt::format("MLP step, batch {}, {}: trainer fit", batch_size,
                                          device.is_cuda() ? "CUDA" : "CPU");
  auto step_row = [&](const std::string& what, const std::vector<double>& v,
                      const std::string& reference, double reference_s, double goal) {
    bench::append_row(table, {"bench_overhead", measure + what, "ms", median(v) * 1e3, reference,
                              reference_s * 1e3, false, goal});
  };
  step_row(", 0 loader workers", fit0, "hand-written LibTorch loop", hand_s, 0.95);
  step_row(", 1 loader worker", fit1, "hand-written LibTorch loop", hand_s, 0);
  if (with_python) step_row(", 0 loader workers", fit0, "Python PyTorch loop", median(py), 1.0);
  return 0;
}
