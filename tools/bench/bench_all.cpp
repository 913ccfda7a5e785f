// bench_all [--quick] [--rounds R] [--python PYTHON] [--markdown FILE] [--only NAMES]
//
// Runs every benchmark of tools/bench on this machine, one after the other, and then prints one
// table of their figures: each row a figure of Crucible's beside the same figure of its reference
// (a hand-written LibTorch loop, PyTorch, a bare LibTorch call), the ratio (how many times better
// Crucible does: reference time / Crucible time, or Crucible rate / reference rate) and the goal
// where there is one. Each benchmark's own output comes first, as it prints it.
//   bench_overhead     framework overhead per training step
//   bench_checkpoint   checkpoint save time and its share of a real run
//   bench_ddp          data-parallel throughput and gradient all-reduce bandwidth (CPU)
//   bench_optim        a SparseAdam step against Python's and against dense Adam's
//   bench_gpu          the Fashion-MNIST CNN job, whole process, on the GPU or the CPU
//   bench_amp.py       mixed precision against fp32, only where CUDA is available
// --quick runs fewer steps, rounds and epochs; --rounds sets bench_gpu's rounds (default 1);
// --markdown FILE also writes the table, with its heading, to FILE; --only NAMES runs only the
// benchmarks named, a comma-separated list of overhead, checkpoint, ddp, optim, gpu and amp.
// Exits 0 when every benchmark ran, else 1 (the table then holds the rows of those that ran);
// a goal that is missed is shown in the table and does not change the exit status.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "bench_util.h"

namespace fs = crucible::util;

namespace {

const std::vector<std::string> kNames = {"overhead", "checkpoint", "ddp", "optim", "gpu", "amp"};

struct Options {
  bool quick = false;
  int rounds = 1;
  std::string python = CRUCIBLE_PYTHON;
  std::string markdown;
  std::set<std::string> only;  // names from kNames; empty: all
};

// The command lines of the benchmarks `o` chooses, each appending its rows to `table`.
std::vector<std::string> commands(const Options& o, const std::string& table) {
  const std::string bin = CRUCIBLE_BIN_DIR;
  const std::vector<std::pair<std::string, std::string>> all = {
      {"overhead", fmt::format("{}/bench_overhead --python {} {}", bin, o.python,
                               o.quick ? "--batches 600 --rounds 3" : "")},
      {"checkpoint",
       fmt::format("{}/bench_checkpoint {}", bin, o.quick ? "--repeats 5 --batches 600" : "")},
      {"ddp", fmt::format("{}/bench_ddp --python {} {}", bin, o.python,
                          o.quick ? "--batches 500 --rounds 2 --sizes-mb 4,64 --repeats 11" : "")},
      {"optim", fmt::format("{}/bench_optim --python {} {}", bin, o.python,
                            o.quick ? "--steps 100 --rounds 2" : "")},
      {"gpu", fmt::format("{}/bench_gpu --python {} --rounds {} {}", bin, o.python, o.rounds,
                          o.quick ? "--epochs 1" : "")},
      // Mixed precision only where CUDA is available: an empty command is left out.
      {"amp", torch::cuda::is_available()
                  ? fmt::format("{} {}/bench_amp.py {}/trainer --epochs {}", o.python,
                                CRUCIBLE_BENCH_DIR, bin, o.quick ? 1 : 2)
                  : ""}};
  std::vector<std::string> out;
  for (const auto& [name, command] : all) {
    if (!command.empty() && (o.only.empty() || o.only.count(name))) {
      out.push_back(command + " --table " + table);
    }
  }
  return out;
}

// A figure with three or four significant digits, never in exponent form.
std::string figure(double v) {
  const double a = std::fabs(v);
  if (a >= 100) return fmt::format("{:.0f}", v);
  if (a >= 10) return fmt::format("{:.1f}", v);
  if (a >= 1) return fmt::format("{:.2f}", v);
  return fmt::format("{:.3f}", v);
}

// "how many times better Crucible does than the reference"; requires a reference.
double ratio(const bench::Row& r) {
  return r.higher_is_better ? r.crucible / r.reference : r.reference / r.crucible;
}

std::string goal_text(const bench::Row& r) {
  if (r.goal <= 0) return "";
  if (!r.reference_name.empty()) return fmt::format(">= {:g}", r.goal);
  return fmt::format("{} {:g} {}", r.higher_is_better ? ">=" : "<=", r.goal, r.unit);
}

std::string met(const bench::Row& r) {
  if (r.goal <= 0) return "";
  bool ok;
  if (!r.reference_name.empty())
    ok = ratio(r) >= r.goal;
  else
    ok = r.higher_is_better ? r.crucible >= r.goal : r.crucible <= r.goal;
  return ok ? "yes" : "no";
}

// The first line `command` prints, or nothing when it fails.
std::optional<std::string> first_line(const std::string& command) {
  int status = 0;
  const std::string out = bench::capture(command + " 2>/dev/null", &status);
  if (status != 0) return std::nullopt;
  return out.substr(0, out.find('\n'));
}

std::string heading() {
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  const std::string git = fmt::format("git -C {}", CRUCIBLE_SOURCE_DIR);
  std::string commit = first_line(git + " rev-parse --short HEAD").value_or("unknown");
  const auto changed = first_line(git + " status --porcelain --untracked-files=no");
  if (changed && !changed->empty()) commit += " with uncommitted changes";
  const std::string device =
      torch::cuda::is_available()
          ? fmt::format("CUDA ({} device(s))", static_cast<int>(torch::cuda::device_count()))
          : fmt::format("CPU ({} cores, torch threads {})", std::thread::hardware_concurrency(),
                        torch::get_num_threads());
  return fmt::format(
      "Crucible benchmarks, {}, commit {}, LibTorch {}, {}\n"
      "ratio: how many times better Crucible does than the reference (reference time / Crucible "
      "time, or Crucible rate / reference rate); above 1, Crucible is ahead",
      date, commit, TORCH_VERSION, device);
}

std::string table_text(const std::vector<bench::Row>& rows) {
  std::string out = heading() + "\n\n";
  out +=
      "| benchmark | measure | unit | Crucible | reference | reference's | ratio | goal | met |\n"
      "|---|---|---|---:|---|---:|---:|---|---|\n";
  for (const auto& r : rows) {
    const bool ref = !r.reference_name.empty();
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", r.benchmark, r.measure,
                       r.unit, figure(r.crucible), r.reference_name, ref ? figure(r.reference) : "",
                       ref ? figure(ratio(r)) : "", goal_text(r), met(r));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quick") {
      o.quick = true;
    } else if (flag == "--rounds" && i + 1 < argc) {
      o.rounds = std::stoi(argv[++i]);
    } else if (flag == "--python" && i + 1 < argc) {
      o.python = argv[++i];
    } else if (flag == "--markdown" && i + 1 < argc) {
      o.markdown = argv[++i];
    } else if (flag == "--only" && i + 1 < argc) {
      std::stringstream names(argv[++i]);
      for (std::string name; std::getline(names, name, ',');) {
        if (std::find(kNames.begin(), kNames.end(), name) == kNames.end()) {
          std::cerr << "bench_all: --only: unknown benchmark '" << name
                    << "' (expected overhead, checkpoint, ddp, gpu or amp)\n";
          return 2;
        }
        o.only.insert(name);
      }
    } else {
      std::cerr << "usage: bench_all [--quick] [--rounds R] [--python PYTHON] [--markdown FILE] "
                   "[--only overhead,checkpoint,ddp,gpu,amp]\n";
      return 2;
    }
  }
  const std::string table =
      fs::join(fs::temp_directory(), fmt::format("crucible_bench_table_{}.jsonl", getpid()));
  int failed = 0;
  for (const auto& command : commands(o, table)) {
    fmt::print("\n$ {}\n", command);
    std::fflush(stdout);
    if (std::system(command.c_str()) != 0) {
      fmt::print("bench_all: that benchmark failed\n");
      ++failed;
    }
  }
  std::vector<bench::Row> rows;
  if (fs::exists(table)) {
    std::istringstream lines(fs::read_file(table));
    for (std::string line; std::getline(lines, line);) {
      rows.push_back(nlohmann::json::parse(line).get<bench::Row>());
    }
    fs::remove(table);
  }
  const std::string text = table_text(rows);
  fmt::print("\n{}", text);
  if (!o.markdown.empty()) {
    std::ofstream out(o.markdown);
    out << text;
    if (!out.flush()) {
      std::cerr << "bench_all: cannot write " << o.markdown << "\n";
      return 1;
    }
  }
  if (failed > 0) fmt::print("bench_all: {} benchmark(s) failed; their rows are missing\n", failed);
  return failed > 0 ? 1 : 0;
}
