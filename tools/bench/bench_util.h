#pragma once

// Small pieces the benchmarks share: medians, numbers out of text, running a command, a port,
// a clock, a `trainer fit` of the bench MLP, and the rows of the one benchmark table (bench_all).

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "free_port.h"
#include "util/file_system.h"

namespace bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The median of `v` (the upper one of an even count); 0 when empty.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The whitespace-separated numbers of `text`, up to the first that is not one.
inline std::vector<double> read_numbers(const std::string& text) {
  std::vector<double> out;
  std::istringstream in(text);
  for (double d; in >> d;) out.push_back(d);
  return out;
}

// Runs `command` through sh; returns its stdout and stores its wait status in *status.
inline std::string capture(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) {
    *status = -1;
    return out;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  *status = pclose(pipe);
  return out;
}

using crucible::util::free_port;

// Sets OMP_NUM_THREADS, unless it is set, to `threads`; returns the value in effect. OpenBLAS
// reads it when it is loaded, so a benchmark calls this before it starts its runners, each in a
// process of its own: they then share one thread count, where OpenBLAS would otherwise start a
// thread per core in each of them and make a comparison on a small machine depend on how those
// threads happen to contend with the runner's own.
inline std::string pin_threads(int threads) {
  if (const char* set = std::getenv("OMP_NUM_THREADS")) return set;
  const std::string value = std::to_string(threads);
  setenv("OMP_NUM_THREADS", value.c_str(), 1);
  return value;
}

// The median of the numbers in file `path`, which is then deleted; 0 when it holds none.
inline double median_of_file(const std::string& path) {
  const double m = median(read_numbers(crucible::util::read_file(path)));
  crucible::util::remove(path);
  return m;
}

// Runs `env trainer fit bench_overhead.yaml ... args` (the bench MLP trial): `env` holds
// environment assignments ("" for none), `args` further options (--set ...). The trial writes its
// step times to `timing`, with ".rank<R>" appended in a distributed run; the run directory is
// removed. Throws std::runtime_error holding the fit's output when it fails.
inline void fit_bench_mlp(const std::string& env, const std::string& args,
                          const std::string& timing) {
  const std::string run = fmt::format("/tmp/crucible_bench_run_{}", getpid());
  const std::string command = fmt::format(
      "{} {}/trainer fit {}/bench_overhead.yaml --quiet --output {} "
      "--set hyperparameters.timing_file={} {} 2>&1",
      env, CRUCIBLE_BIN_DIR, CRUCIBLE_BENCH_DIR, run, timing, args);
  int status = 0;
  const std::string log = capture(command, &status);
  crucible::util::remove_all(run);
  if (status != 0) throw std::runtime_error("trainer fit failed:\n" + log);
}

// One row of the benchmark table: a figure of Crucible's beside the same figure of a reference
// (a hand-written LibTorch loop, PyTorch, a bare LibTorch call), or alone.
struct Row {
  std::string benchmark;  // the program that measured it, e.g. "bench_overhead"
  std::string measure;    // what was measured, e.g. "MLP step, trainer fit, 0 loader workers"
  std::string unit;       // of `crucible` and `reference`, e.g. "ms", "samples/s", "%"
  double crucible = 0;
  std::string reference_name;  // empty: the row has no reference
  double reference = 0;
  bool higher_is_better = false;
  // 0: none. With a reference, the least acceptable ratio (how many times better Crucible does
  // than the reference: reference / crucible, or crucible / reference when higher is better).
  // Without one, the least (higher is better) or most acceptable value of `crucible`.
  double goal = 0;
};

NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(Row, benchmark, measure, unit, crucible, reference_name,
                                   reference, higher_is_better, goal)

// Appends `row` to table file `path` as one JSON line; does nothing when `path` is empty.
// Throws std::runtime_error when the file cannot be written.
inline void append_row(const std::string& path, const Row& row) {
  if (path.empty()) return;
  FILE* f = std::fopen(path.c_str(), "a");
  const std::string line = nlohmann::json(row).dump() + "\n";
  const bool ok = f && std::fwrite(line.data(), 1, line.size(), f) == line.size();
  if (!f || std::fclose(f) != 0 || !ok) {
    throw std::runtime_error("cannot append to benchmark table " + path);
  }
}

}  // namespace bench
