// bench_ddp [--batches N] [--batch-size B] [--rounds R] [--python PYTHON] [--sizes-mb LIST]
//           [--repeats K] [--embedding-batches E] [--parts abc] [--table FILE]
//
// Two processes on this machine's CPU (CUDA devices hidden, as two ranks cannot share one GPU
// under NCCL), both sides with the same OMP_NUM_THREADS (cores / 2 unless set):
// (a) data-parallel training throughput: the bench MLP through `trainer fit --slots 2` vs Python
//     PyTorch's DistributedDataParallel over Gloo (Debian's python3-torch), B records per rank
//     per step, the same data and split; samples/s from the median step time of rank 0, rounds
//     interleaved.
// (b) gradient all-reduce bus bandwidth: Crucible's gradient sync (GradientSync::finish over 8
//     gradient tensors of S bytes in all, default 25 MB buckets), with gradients copied into
//     and out of the buckets and with gradients as bucket views (the default), vs one bare c10d
//     Gloo all-reduce of an S-byte tensor; median of K; bus bandwidth = S / t * 2(n-1)/n.
// (c) sparse gradients: bench_model.h's EmbeddingNet (a 64 MiB EmbeddingBag table, sparse
//     gradients) as in (a), E steps: `trainer fit --slots 2` vs PyTorch DDP (which sends sparse
//     gradients sparse), and vs `trainer fit --slots 2` of the same model with dense gradients
//     (the whole table all-reduced every step).
// --parts runs the parts named (default all). The table rows go to FILE (bench_all): (a), (b) at
// the largest size, and (c).
#include <cstdlib>
#include <iostream>
#include <thread>

#include <fmt/format.h>

#include "bench_model.h"
#include "bench_util.h"
#include "distributed/collectives.h"
#include "distributed/grad_sync.h"
#include "distributed/rendezvous.h"
#include "launch/launcher.h"

namespace {

using bench::Clock;
using bench::seconds_since;
constexpr int kRanks = 2;

// One rank of (b): prints "bytes bare_s crucible_s" per size on rank 0.
int allreduce_worker(const std::vector<int64_t>& sizes_mb, int repeats) {
  namespace dist = crucible::dist;
  const auto rendezvous = dist::from_environment(dist::process_environment());
  if (!rendezvous) throw std::runtime_error("the worker needs launcher variables");
  const crucible::DistributedContext ctx = dist::connect(*rendezvous, std::chrono::seconds(120));
  for (const int64_t mb : sizes_mb) {
    const int64_t elements = mb * (1 << 20) / 4;
    torch::Tensor flat = torch::randn({elements});
    // One sync per mode, each over its own 8 gradient tensors.
    std::vector<std::unique_ptr<dist::GradientSync>> syncs;
    for (const bool view : {false, true}) {
      std::vector<torch::Tensor> params;
      for (int i = 0; i < 8; ++i) {
        params.push_back(torch::zeros({elements / 8}).requires_grad_());
        params.back().mutable_grad() = torch::randn({elements / 8});
      }
      syncs.push_back(std::make_unique<dist::GradientSync>(
          ctx, params, dist::GradientSyncOptions().overlap(false).as_bucket_view(view)));
    }
    // Alternating, so that drift of the machine hits all alike.
    std::vector<std::vector<double>> times(1 + syncs.size());
    for (int i = 0; i < repeats + 2; ++i) {
      auto t = Clock::now();
      crucible::detail::DistributedAccess::collectives(ctx)->allreduce_async(flat)->wait();
      if (i >= 2) times[0].push_back(seconds_since(t));
      for (size_t k = 0; k < syncs.size(); ++k) {
        t = Clock::now();
        syncs[k]->finish();
        if (i >= 2) times[k + 1].push_back(seconds_since(t));
      }
    }
    if (ctx.is_chief()) {
      std::cout << elements * 4;
      for (const auto& t : times) std::cout << " " << bench::median(t);
      std::cout << std::endl;
    }
  }
  return 0;
}

// The --set options that make the bench trial the embedding workload (sparse or dense gradients).
std::string embedding_sets(bool sparse) {
  return fmt::format(
      "--set entrypoint=bench_mlp:BenchEmbeddingTrial --set hyperparameters.sparse={}", sparse);
}

// Median step time of rank 0 of `trainer fit` on the bench MLP with 2 slots, or on the workload
// `sets` selects.
double crucible_step(int64_t batches, int64_t per_rank, int64_t warmup,
                     const std::string& sets = "") {
  const std::string timing = fmt::format("/tmp/crucible_bench_ddp_{}.txt", getpid());
  bench::fit_bench_mlp(
      "",
      fmt::format("--slots {} --set max_length.batches={} "
                  "--set hyperparameters.global_batch_size={} "
                  "--set hyperparameters.warmup={} --set hyperparameters.workers=0 {}",
                  kRanks, batches, per_rank * kRanks, warmup, sets),
      timing);
  double step = 0;
  for (int r = 0; r < kRanks; ++r) {
    const double median = bench::median_of_file(timing + ".rank" + std::to_string(r));
    if (r == 0) step = median;
  }
  return step;
}

// Median step time of rank 0 of the DDP script on `workload` (mlp, embedding); 0 when Python or
// torch is missing.
double pytorch_step(const std::string& python, int64_t batches, int64_t per_rank, int64_t warmup,
                    const std::string& workload = "mlp") {
  const std::string script = fmt::format("{} {}/ddp_pytorch.py {} {} {} {}", python,
                                         CRUCIBLE_BENCH_DIR, batches, per_rank, warmup, workload);
  const std::string command = fmt::format(
      "export MASTER_ADDR=127.0.0.1 MASTER_PORT={} WORLD_SIZE={}; "
      "RANK=1 {} > /dev/null 2>&1 & RANK=0 {} 2>/dev/null; status=$?; wait; exit $status",
      bench::free_port(), kRanks, script, script);
  int status = 0;
  const std::string out = bench::capture(command, &status);
  return status == 0 ? bench::median(bench::read_numbers(out)) : 0;
}

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

// The command line's settings.
struct Settings {
  int64_t batches = 1500, per_rank = 64, warmup = 20, embedding_batches = 300;
  int rounds = 3, repeats = 31;
  std::string python = "/usr/bin/python3";
  std::string sizes = "1,4,16,64", table, parts = "abc";
  std::string threads;  // OMP_NUM_THREADS in effect
};

// (a): the MLP through trainer fit --slots 2 and PyTorch DDP.
void data_parallel_mlp(const Settings& o) {
  std::vector<double> ours, theirs;
  for (int round = 0; round < o.rounds; ++round) {
    ours.push_back(crucible_step(o.batches, o.per_rank, o.warmup));
    const double py = pytorch_step(o.python, o.batches, o.per_rank, o.warmup);
    if (py > 0) theirs.push_back(py);
  }
  const double global = static_cast<double>(o.per_rank * kRanks);
  fmt::print(
      "(a) data-parallel MLP 784-256-128-10, {} processes, batch {} per rank, {} steps ({} "
      "warm-up), {} rounds, OMP_NUM_THREADS={}\n",
      kRanks, o.per_rank, o.batches, o.warmup, o.rounds, o.threads);
  const double our_rate = global / bench::median(ours);
  fmt::print("Crucible trainer fit --slots 2          {:>9.0f} samples/s  ({:.3f} ms/step)\n",
             our_rate, bench::median(ours) * 1e3);
  if (theirs.size() == static_cast<size_t>(o.rounds)) {
    const double their_rate = global / bench::median(theirs);
    fmt::print("PyTorch DistributedDataParallel (Gloo)  {:>9.0f} samples/s  ({:.3f} ms/step)\n",
               their_rate, bench::median(theirs) * 1e3);
    fmt::print("ratio Crucible / PyTorch DDP: {:.3f}\n", our_rate / their_rate);
    bench::append_row(o.table,
                      {"bench_ddp",
                       fmt::format("data-parallel MLP, 2 CPU processes, batch {} per "
                                   "rank: trainer fit --slots 2",
                                   o.per_rank),
                       "samples/s", our_rate, "PyTorch DDP (Gloo)", their_rate, true, 1.0});
  } else {
    fmt::print("PyTorch DDP: skipped ({} cannot run torch.distributed with Gloo)\n", o.python);
  }
}

// (b): the gradient sync's all-reduce against a bare one, in launched workers.
void gradient_allreduce(const Settings& o) {
  const auto options = crucible::launch::LaunchOptions()
                           .command({crucible::util::read_symlink("/proc/self/exe"),
                                     "--allreduce-worker", o.sizes, std::to_string(o.repeats)})
                           .slots(kRanks);
  std::ostringstream out, err;
  const auto result = crucible::launch::launch(options, out, err);
  if (result.exit_code != 0) throw std::runtime_error(result.failure + "\n" + err.str());
  fmt::print(
      "\n(b) gradient all-reduce, {} processes, median of {}; busbw = size / time * 2(n-1)/n\n",
      kRanks, o.repeats);
  fmt::print("{:>8}  {:>12} {:>6}  {:>12} {:>6} {:>6}  {:>12} {:>6} {:>6}\n", "", "bare c10d", "",
             "Crucible copy", "", "", "Crucible view", "", "");
  fmt::print("{:>8}  {:>12} {:>6}  {:>12} {:>6} {:>6}  {:>12} {:>6} {:>6}\n", "size", "ms", "GB/s",
             "ms", "GB/s", "ratio", "ms", "GB/s", "ratio");
  std::istringstream lines(out.str());
  const double factor = 2.0 * (kRanks - 1) / kRanks;
  std::vector<double> largest;
  for (std::string line; std::getline(lines, line);) {
    const std::string prefix = "[rank 0] ";
    if (line.rfind(prefix, 0) != 0) continue;
    const auto v = bench::read_numbers(line.substr(prefix.size()));
    if (v.size() != 4) continue;
    const auto busbw = [&](double t) { return v[0] / t * factor / 1e9; };
    fmt::print(
        "{:>5.0f} MB  {:>12.2f} {:>6.2f}  {:>12.2f} {:>6.2f} {:>6.3f}  {:>12.2f} {:>6.2f} "
        "{:>6.3f}\n",
        v[0] / (1 << 20), v[1] * 1e3, busbw(v[1]), v[2] * 1e3, busbw(v[2]), v[1] / v[2], v[3] * 1e3,
        busbw(v[3]), v[1] / v[3]);
    if (largest.empty() || v[0] > largest[0]) largest = v;
  }
  if (!largest.empty()) {
    const auto busbw = [&](double t) { return largest[0] / t * factor / 1e9; };
    bench::append_row(o.table, {"bench_ddp",
                                fmt::format("gradient all-reduce, {:.0f} MB, 2 CPU processes: "
                                            "gradient sync, buckets as views",
                                            largest[0] / (1 << 20)),
                                "GB/s", busbw(largest[3]), "bare c10d Gloo all-reduce",
                                busbw(largest[1]), true, 0});
  }
}

// (c): the embedding workload, sparse and dense, and PyTorch DDP's sparse.
void data_parallel_embedding(const Settings& o) {
  const double global = static_cast<double>(o.per_rank * kRanks);
  std::vector<double> sparse, dense, ddp_sparse;
  for (int round = 0; round < o.rounds; ++round) {
    sparse.push_back(
        crucible_step(o.embedding_batches, o.per_rank, o.warmup, embedding_sets(true)));
    dense.push_back(
        crucible_step(o.embedding_batches, o.per_rank, o.warmup, embedding_sets(false)));
    const double py =
        pytorch_step(o.python, o.embedding_batches, o.per_rank, o.warmup, "embedding");
    if (py > 0) ddp_sparse.push_back(py);
  }
  fmt::print(
      "\n(c) data-parallel EmbeddingBag {} x {} ({} MiB), mean of {} lookups, then {} classes; "
      "{} "
      "processes, batch {} per rank, {} steps ({} warm-up), {} rounds\n",
      bench::kTableRows, bench::kEmbeddingDim, bench::kTableRows * bench::kEmbeddingDim * 4 >> 20,
      bench::kLookups, bench::kClasses, kRanks, o.per_rank, o.embedding_batches, o.warmup,
      o.rounds);
  const auto rate = [&](const std::vector<double>& steps) { return global / bench::median(steps); };
  fmt::print(
      "Crucible trainer fit --slots 2, sparse gradients  {:>9.0f} samples/s  ({:.3f} ms/step)\n",
      rate(sparse), bench::median(sparse) * 1e3);
  fmt::print(
      "Crucible trainer fit --slots 2, dense gradients   {:>9.0f} samples/s  ({:.3f} ms/step)\n",
      rate(dense), bench::median(dense) * 1e3);
  const std::string measure = fmt::format(
      "data-parallel EmbeddingBag (64 MiB table), 2 CPU processes, batch {} per rank: trainer "
      "fit --slots 2, sparse gradients",
      o.per_rank);
  if (ddp_sparse.size() == static_cast<size_t>(o.rounds)) {
    fmt::print(
        "PyTorch DDP (Gloo), sparse gradients             {:>9.0f} samples/s  ({:.3f} ms/step)\n",
        rate(ddp_sparse), bench::median(ddp_sparse) * 1e3);
    fmt::print("ratio Crucible / PyTorch DDP: {:.3f}\n", rate(sparse) / rate(ddp_sparse));
    bench::append_row(o.table,
                      {"bench_ddp", measure, "samples/s", rate(sparse),
                       "PyTorch DDP (Gloo), sparse gradients", rate(ddp_sparse), true, 1.0});
  } else {
    fmt::print("PyTorch DDP: skipped ({} cannot run torch.distributed with Gloo)\n", o.python);
  }
  fmt::print("ratio sparse / dense gradients: {:.3f}\n", rate(sparse) / rate(dense));
  bench::append_row(o.table, {"bench_ddp", measure, "samples/s", rate(sparse),
                              "the same with dense gradients", rate(dense), true, 0});
}

}  // namespace

int main(int argc, char** argv) {
  Settings o;
  try {
    if (argc == 4 && std::string(argv[1]) == "--allreduce-worker") {
      return allreduce_worker(parse_list(argv[2]), std::stoi(argv[3]));
    }
    for (int i = 1; i + 1 < argc; i += 2) {
      const std::string flag = argv[i], value = argv[i + 1];
      if (flag == "--batches") {
        o.batches = std::stoll(value);
      } else if (flag == "--batch-size") {
        o.per_rank = std::stoll(value);
      } else if (flag == "--rounds") {
        o.rounds = std::stoi(value);
      } else if (flag == "--python") {
        o.python = value;
      } else if (flag == "--sizes-mb") {
        o.sizes = value;
      } else if (flag == "--repeats") {
        o.repeats = std::stoi(value);
      } else if (flag == "--embedding-batches") {
        o.embedding_batches = std::stoll(value);
      } else if (flag == "--parts") {
        o.parts = value;
      } else if (flag == "--table") {
        o.table = value;
      } else {
        std::cerr << "usage: bench_ddp [--batches N] [--batch-size B] [--rounds R] "
                     "[--python PYTHON] [--sizes-mb LIST] [--repeats K] [--embedding-batches E] "
                     "[--parts abc] [--table FILE]\n";
        return 2;
      }
    }
    const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    o.threads = bench::pin_threads(std::max(1, cores / kRanks));
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    if (o.parts.find('a') != std::string::npos) data_parallel_mlp(o);
    if (o.parts.find('b') != std::string::npos) gradient_allreduce(o);
    if (o.parts.find('c') != std::string::npos) data_parallel_embedding(o);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_ddp: " << e.what() << "\n";
    return 1;
  }
}
