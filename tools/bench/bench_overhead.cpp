// bench_overhead [--batches N] [--batch-size B] [--rounds R] [--python PYTHON]
//
// Median step time of one MLP training step (a) through `trainer fit` with the bench_mlp trial,
// (b) in a hand-written LibTorch loop doing the same work, (c) in Python PyTorch when a Python
// with torch is available. Prints each median and the ratios to the hand-written loop.
#include <unistd.h>
#include <algorithm>
#include <cstdio>

#include <cstdlib>
#include <iostream>
#include <sstream>

#include <fmt/format.h>

#include "bench_model.h"
#include "bench_util.h"

namespace {

using bench::capture;
using bench::median;
using bench::read_numbers;

std::vector<double> hand_written(int64_t batches, int64_t batch_size, int64_t warmup) {
  torch::manual_seed(1);
  bench::MLP model;
  auto opt = bench::make_optimizer(model);
  auto [x, y] = bench::make_data(1);
  const int64_t per_epoch = bench::kRecords / batch_size;
  torch::Tensor perm;
  bench::StepClock clock;
  for (int64_t b = 0; b < batches; ++b) {
    clock.tick();
    if (b % per_epoch == 0) perm = torch::randperm(bench::kRecords, torch::kLong);
    auto idx = perm.slice(0, (b % per_epoch) * batch_size, (b % per_epoch + 1) * batch_size);
    auto loss = torch::nn::functional::cross_entropy(model->forward(x.index_select(0, idx)),
                                                     y.index_select(0, idx));
    opt.zero_grad();
    loss.backward();
    opt.step();
  }
  return clock.durations(static_cast<size_t>(warmup));
}

// Runs `trainer fit` on the bench trial; stores the median step time in *median_s.
bool trainer_steps(int64_t batches, int64_t batch_size, int64_t warmup, int workers,
                   double* median_s) {
  const std::string timing = fmt::format("/tmp/crucible_bench_steps_{}.txt", getpid());
  const std::string run = fmt::format("/tmp/crucible_bench_run_{}", getpid());
  const std::string command = fmt::format(
      "{}/trainer fit {}/bench_overhead.yaml --quiet --output {} --set max_length.batches={} "
      "--set hyperparameters.global_batch_size={} --set hyperparameters.warmup={} "
      "--set hyperparameters.workers={} --set hyperparameters.timing_file={} 2>&1",
      CRUCIBLE_BIN_DIR, CRUCIBLE_BENCH_DIR, run, batches, batch_size, warmup, workers, timing);
  int rc = 0;
  const std::string log = capture(command, &rc);
  crucible::util::remove_all(run);
  if (rc != 0) {
    std::cerr << "trainer fit failed:\n" << log;
    return false;
  }
  std::ifstream in(timing);
  std::stringstream text;
  text << in.rdbuf();
  crucible::util::remove(timing);
  *median_s = median(read_numbers(text.str()));
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batches = 2000, batch_size = 64, warmup = 20;
  int rounds = 5;
  std::string python = "/usr/bin/python3";
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
    else {
      std::cerr << "usage: bench_overhead [--batches N] [--batch-size B] [--rounds R] "
                   "[--python PYTHON]\n";
      return 2;
    }
  }
  // Rounds interleave the variants so that drift of the machine hits all of them alike.
  std::vector<double> hand, fit0, fit1, py;
  for (int round = 0; round < rounds; ++round) {
    hand.push_back(median(hand_written(batches, batch_size, warmup)));
    for (int workers : {0, 1}) {
      double s = 0;
      if (!trainer_steps(batches, batch_size, warmup, workers, &s)) return 1;
      (workers == 0 ? fit0 : fit1).push_back(s);
    }
    int rc = 0;
    const std::string out =
        capture(fmt::format("{} {}/overhead_pytorch.py {} {} {} 2>/dev/null", python,
                            CRUCIBLE_BENCH_DIR, batches, batch_size, warmup),
                &rc);
    if (rc == 0) py.push_back(median(read_numbers(out)));
  }
  const double hand_s = median(hand);
  fmt::print("MLP 784-256-128-10, batch {}, {} steps ({} warm-up), {} rounds, torch threads {}\n",
             batch_size, batches, warmup, rounds, torch::get_num_threads());
  fmt::print("median over rounds of each round's median step time; ratio = time / hand-written\n");
  auto row = [&](const std::string& name, const std::vector<double>& v) {
    fmt::print("{:<38} {:>8.3f} ms/step   ratio {:.3f}\n", name, median(v) * 1e3,
               median(v) / hand_s);
  };
  row("hand-written LibTorch loop", hand);
  row("Crucible trainer fit, 0 loader workers", fit0);
  row("Crucible trainer fit, 1 loader worker", fit1);
  if (py.size() == static_cast<size_t>(rounds)) {
    row("Python PyTorch loop", py);
  } else {
    fmt::print("Python PyTorch loop: skipped ({} has no torch; apt-get install python3-torch)\n",
               python);
  }
  return 0;
}
