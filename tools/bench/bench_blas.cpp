// bench_blas [--batches N] [--cnn-batches M] [--rounds R] [--libdir DIR]
//
// What the BLAS build and the thread count do to CPU training. Runs trainer fit with each of
// Debian's two OpenBLAS builds put first on the library path (DIR/openblas-pthread and
// DIR/openblas-openmp; DIR defaults to /usr/lib/<multiarch>), each with OMP_NUM_THREADS unset
// (LibTorch's and OpenBLAS's own defaults), 1, and this process's CPU count:
//   - the bench MLP (bench_overhead.yaml), N steps: median step time with 0 and 1 loader workers;
//   - the Fashion-MNIST CNN job (configs/fashion_mnist_cnn.yaml) cut to M batches: the whole
//     process's wall time (start-up and the final validation included).
// Rounds interleave the settings. Prints, for each, the intra-op threads and BLAS that trainer
// fit logged, the medians over rounds, and each figure's ratio to the first setting's (pthreads,
// OMP_NUM_THREADS unset: what Debian installs by default), > 1 meaning faster.
#include <iostream>
#include <map>
#include <regex>

#include <fmt/format.h>

#include "bench_util.h"
#include "util/cpus.h"

namespace {

struct Setting {
  std::string build;    // "pthread" or "openmp"
  std::string threads;  // OMP_NUM_THREADS, "" for unset
  std::string env(const std::string& libdir) const {
    return fmt::format("env {} LD_LIBRARY_PATH={}/openblas-{}",
                       threads.empty() ? "-u OMP_NUM_THREADS" : "OMP_NUM_THREADS=" + threads,
                       libdir, build);
  }
  std::string name() const {
    return fmt::format("{}, OMP_NUM_THREADS {}", build == "pthread" ? "pthreads" : "OpenMP",
                       threads.empty() ? "unset" : threads);
  }
};

struct Figures {
  std::vector<double> mlp0, mlp1, cnn;
  std::string logged;  // trainer fit's "cpu: ..." line
};

// The "cpu: ..." line of a run's trainer.log.
std::string cpu_line(const std::string& run) {
  const std::string log = crucible::util::read_file(run + "/trainer.log");
  std::smatch m;
  return std::regex_search(log, m, std::regex("cpu: ([^\n]*)")) ? m[1].str() : "?";
}

double mlp_step(const Setting& s, const std::string& libdir, int64_t batches, int workers) {
  const std::string timing = fmt::format("/tmp/crucible_bench_blas_{}.txt", getpid());
  bench::fit_bench_mlp(
      s.env(libdir),
      fmt::format("--set max_length.batches={} --set hyperparameters.workers={}", batches, workers),
      timing);
  return bench::median_of_file(timing);
}

// Wall time of the CNN job cut to `batches`; stores its logged cpu line in *logged.
double cnn_wall(const Setting& s, const std::string& libdir, int64_t batches, std::string* logged) {
  const std::string run = fmt::format("/tmp/crucible_bench_blas_run_{}", getpid());
  const auto start = bench::Clock::now();
  int status = 0;
  const std::string log = bench::capture(
      fmt::format("{} {}/trainer fit {}/configs/fashion_mnist_cnn.yaml --quiet --output {} "
                  "--set 'max_length={{batches: {}}}' --set checkpoint_policy=none 2>&1",
                  s.env(libdir), CRUCIBLE_BIN_DIR, CRUCIBLE_SOURCE_DIR, run, batches),
      &status);
  const double wall = bench::seconds_since(start);
  if (status != 0) {
    crucible::util::try_remove_all(run);
    throw std::runtime_error("trainer fit failed:\n" + log);
  }
  *logged = cpu_line(run);
  crucible::util::remove_all(run);
  return wall;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batches = 1000, cnn_batches = 300;
  int rounds = 2;
  std::string libdir = CRUCIBLE_MULTIARCH_LIBDIR;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--batches")
      batches = std::stoll(argv[i + 1]);
    else if (flag == "--cnn-batches")
      cnn_batches = std::stoll(argv[i + 1]);
    else if (flag == "--rounds")
      rounds = std::stoi(argv[i + 1]);
    else if (flag == "--libdir")
      libdir = argv[i + 1];
    else {
      std::cerr
          << "usage: bench_blas [--batches N] [--cnn-batches M] [--rounds R] [--libdir DIR]\n";
      return 2;
    }
  }
  for (const char* build : {"pthread", "openmp"}) {
    const std::string lib = fmt::format("{}/openblas-{}/libopenblas.so.0", libdir, build);
    if (!crucible::util::exists(lib)) {
      std::cerr << "bench_blas: " << lib
                << " is missing (Debian: apt-get install libopenblas0-pthread "
                   "libopenblas0-openmp)\n";
      return 1;
    }
  }
  const std::string cpus = std::to_string(crucible::util::allowed_cpus().size());
  std::vector<Setting> settings;
  for (const char* build : {"pthread", "openmp"}) {
    for (const std::string& threads : {std::string(), std::string("1"), cpus}) {
      if (threads == "1" && cpus == "1") continue;
      settings.push_back({build, threads});
    }
  }
  std::vector<Figures> figures(settings.size());
  try {
    for (int round = 0; round < rounds; ++round) {
      for (size_t i = 0; i < settings.size(); ++i) {
        figures[i].mlp0.push_back(mlp_step(settings[i], libdir, batches, 0));
        figures[i].mlp1.push_back(mlp_step(settings[i], libdir, batches, 1));
        figures[i].cnn.push_back(cnn_wall(settings[i], libdir, cnn_batches, &figures[i].logged));
      }
    }
  } catch (const std::exception& e) {
    std::cerr << e.what();
    return 1;
  }
  fmt::print(
      "{} CPUs; median over {} rounds. MLP 784-256-128-10 step, batch 64, {} steps; CNN job "
      "(fashion_mnist_cnn.yaml) cut to {} batches, process wall time. (x): the first setting's "
      "figure / this one's, > 1 faster\n",
      cpus, rounds, batches, cnn_batches);
  const Figures& base = figures.front();
  fmt::print("{:<32} {:<68} {:>18} {:>18} {:>16}\n", "BLAS build, threads", "trainer fit logged",
             "MLP 0 workers ms", "MLP 1 worker ms", "CNN job s");
  for (size_t i = 0; i < settings.size(); ++i) {
    const Figures& f = figures[i];
    auto cell = [](const std::vector<double>& v, const std::vector<double>& b, double scale) {
      return fmt::format("{:.3f} ({:.2f}x)", bench::median(v) * scale,
                         bench::median(b) / bench::median(v));
    };
    fmt::print("{:<32} {:<68} {:>18} {:>18} {:>16}\n", settings[i].name(), f.logged,
               cell(f.mlp0, base.mlp0, 1e3), cell(f.mlp1, base.mlp1, 1e3),
               cell(f.cnn, base.cnn, 1));
  }
  return 0;
}
