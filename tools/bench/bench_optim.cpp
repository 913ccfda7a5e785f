// bench_optim [--steps N] [--rounds R] [--lookups L] [--python PYTHON] [--table FILE]
//
// One optimizer step of an embedding table of bench_model.h's size (262144 x 64, 64 MiB) whose
// gradient holds L random rows (1024 by default: bench_ddp (c)'s batch of 64 records of 16
// lookups), repeats included and uncoalesced, as the backward of an Embedding with sparse(true)
// makes it; a pool of 4 such gradients is taken in turn:
//   crucible::optim::SparseAdam on the sparse gradient;
//   Python's torch.optim.SparseAdam on the same kind of gradient (sparse_adam_pytorch.py);
//   LibTorch's torch::optim::Adam on the gradient made dense (outside the timing), what a trial
//   without SparseAdam has to run: Adam refuses sparse gradients.
// The sparse runners take N timed steps (default 200) after 10 untimed ones, the dense one N / 10
// (its step is about 200 times longer), in R rounds (default 3) interleaved; the figure is the
// median round's mean step. Prints ms per step and SparseAdam's time over each other runner's;
// with --table, appends its rows to FILE (bench_all's table).
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include <crucible/optimizers.h>

#include "bench_model.h"
#include "bench_util.h"

namespace {

constexpr int64_t kWarmup = 10;
constexpr size_t kPool = 4;

struct Options {
  int64_t steps = 200;
  int rounds = 3;
  int64_t lookups = 1024;
  std::string python = CRUCIBLE_PYTHON;
  std::string table;
};

// kPool sparse gradients of the table, `lookups` random rows each.
std::vector<torch::Tensor> sparse_gradients(int64_t lookups) {
  torch::manual_seed(1);
  std::vector<torch::Tensor> pool;
  for (size_t i = 0; i < kPool; ++i) {
    pool.push_back(torch::sparse_coo_tensor(
        torch::randint(0, bench::kTableRows, {1, lookups}, torch::kLong),
        torch::randn({lookups, bench::kEmbeddingDim}), {bench::kTableRows, bench::kEmbeddingDim}));
  }
  return pool;
}

// Seconds per step of `optimizer` over `table` with the gradients of `pool` in turn.
double time_steps(torch::optim::Optimizer& optimizer, torch::Tensor& table,
                  const std::vector<torch::Tensor>& pool, int64_t steps) {
  torch::NoGradGuard no_grad;
  bench::Clock::time_point start;
  for (int64_t step = 0; step < kWarmup + steps; ++step) {
    if (step == kWarmup) start = bench::Clock::now();
    table.mutable_grad() = pool[static_cast<size_t>(step) % pool.size()];
    optimizer.step();
  }
  return bench::seconds_since(start) / static_cast<double>(steps);
}

double sparse_adam_round(const std::vector<torch::Tensor>& pool, int64_t steps) {
  torch::Tensor table = torch::randn({bench::kTableRows, bench::kEmbeddingDim}).requires_grad_();
  crucible::optim::SparseAdam optimizer({table}, crucible::optim::SparseAdamOptions(1e-3));
  return time_steps(optimizer, table, pool, steps);
}

double dense_adam_round(const std::vector<torch::Tensor>& dense_pool, int64_t steps) {
  torch::Tensor table = torch::randn({bench::kTableRows, bench::kEmbeddingDim}).requires_grad_();
  torch::optim::Adam optimizer({table}, torch::optim::AdamOptions(1e-3));
  return time_steps(optimizer, table, dense_pool, steps);
}

// Python's seconds per step; 0 when the runner fails (its output is then printed).
double python_round(const Options& o) {
  int status = 0;
  const std::string out = bench::capture(
      fmt::format("{} {}/sparse_adam_pytorch.py {} {} {} {} {} 2>&1", o.python, CRUCIBLE_BENCH_DIR,
                  bench::kTableRows, bench::kEmbeddingDim, o.lookups, o.steps, kWarmup),
      &status);
  const std::vector<double> numbers = bench::read_numbers(out);
  if (status != 0 || numbers.size() != 1) {
    std::cerr << "bench_optim: the Python runner failed:\n" << out;
    return 0;
  }
  return numbers[0];
}

int run(const Options& o) {
  const std::string threads = bench::pin_threads(torch::get_num_threads());
  const std::vector<torch::Tensor> pool = sparse_gradients(o.lookups);
  std::vector<torch::Tensor> dense_pool;
  for (const auto& g : pool) dense_pool.push_back(g.to_dense());
  std::vector<double> sparse, python, dense;
  for (int r = 0; r < o.rounds; ++r) {
    sparse.push_back(sparse_adam_round(pool, o.steps));
    if (const double p = python_round(o); p > 0) python.push_back(p);
    dense.push_back(dense_adam_round(dense_pool, std::max<int64_t>(1, o.steps / 10)));
  }
  const double s = bench::median(sparse) * 1e3, d = bench::median(dense) * 1e3;
  fmt::print(
      "optimizer step of a {} x {} table ({} MiB), gradient of {} random rows, {} steps after {} "
      "warm-up, {} rounds, OMP_NUM_THREADS={}, LibTorch {}; ratio: SparseAdam's time / the "
      "runner's\n",
      bench::kTableRows, bench::kEmbeddingDim, bench::kTableRows * bench::kEmbeddingDim * 4 >> 20,
      o.lookups, o.steps, kWarmup, o.rounds, threads, TORCH_VERSION);
  fmt::print("crucible::optim::SparseAdam, sparse gradient     {:>9.3f} ms/step\n", s);
  const std::string measure = fmt::format(
      "optimizer step, 64 MiB embedding table, gradient of {} rows: crucible::optim::SparseAdam",
      o.lookups);
  if (python.size() == static_cast<size_t>(o.rounds)) {
    const double p = bench::median(python) * 1e3;
    fmt::print("Python torch.optim.SparseAdam, sparse gradient   {:>9.3f} ms/step  ratio {:.3f}\n",
               p, s / p);
    bench::append_row(
        o.table, {"bench_optim", measure, "ms", s, "Python torch.optim.SparseAdam", p, false, 1.0});
  }
  fmt::print("LibTorch torch::optim::Adam, dense gradient      {:>9.3f} ms/step  ratio {:.3f}\n", d,
             s / d);
  bench::append_row(o.table, {"bench_optim", measure, "ms", s,
                              "torch::optim::Adam on the dense gradient", d, false, 0});
  return python.size() == static_cast<size_t>(o.rounds) ? 0 : 1;
}

int usage() {
  std::cerr << "usage: bench_optim [--steps N] [--rounds R] [--lookups L] [--python PYTHON] "
               "[--table FILE]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--steps") {
      o.steps = std::stoll(value);
    } else if (flag == "--rounds") {
      o.rounds = std::stoi(value);
    } else if (flag == "--lookups") {
      o.lookups = std::stoll(value);
    } else if (flag == "--python") {
      o.python = value;
    } else if (flag == "--table") {
      o.table = value;
    } else {
      return usage();
    }
  }
  if (argc % 2 == 0 || o.steps < 1 || o.rounds < 1 || o.lookups < 1) return usage();
  return run(o);
}
