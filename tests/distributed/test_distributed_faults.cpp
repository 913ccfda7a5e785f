// Storage faults on one rank of a 2-rank run, both ranks started with torchrun's variables: the
// chief of a fit (the only rank that writes the run directory), rank 1 of a fit (which only looks
// up whether the directory holds a run) and rank 1 of a resume (which reads the checkpoint too).
// The faulted rank runs under tests/support/fault_injection.cpp with one of its calls under the run
// failing; the other runs without it. Whichever call fails, both processes must end (neither waits
// for the other until the test's timeout), the faulted rank as a single process would (the cause
// and the path named, or a warning and a whole run), the other with the chief's error when the
// chief failed while opening the run, and otherwise as a rank whose peer died, unless the faulted
// rank went on; and a plain resume on 2 slots must finish the run bitwise identical to a 2-rank run
// that met no fault.

#include <cstring>
#include <string>

#include <fmt/format.h>

#include "catch.h"

#include <crucible/errors.h>

#include "fault_injection.h"
#include "resumable_run.h"
#include "torchrun_env.h"

namespace crucible::testing {
namespace {

constexpr int64_t kBatches = 48;   // checkpoints at 20, 32, 40 and 48, one deleted
constexpr double kEndWithin = 60;  // seconds one rank may take to end after the other did
// Seconds a rank of a run with a fault waits for the other (CRUCIBLE_DIST_TIMEOUT); the runs
// without one keep the default 300 s.
constexpr int kTimeout = 8;
const std::string kShort = " --set max_length.batches=48 --slots 2 --quiet";

using Runs = ResumableRuns;

// `trainer fit` of the short run into `run` on 2 slots (the built-in launcher, or one rank of an
// outside launcher's when run with its variables).
std::string fit_command(const Runs& runs, const std::string& run) {
  return kTrainer + " fit " + runs.config + kShort + " --output " + run;
}

// `trainer fit --resume` of `run` (on the 2 slots its config names).
std::string resume_command(const std::string& run) {
  return kTrainer + " fit --resume " + run + " --quiet";
}

// The variables of rank `rank` of a 2-rank run whose store is at `port`; with `faulted_run`,
// CRUCIBLE_DIST_TIMEOUT=kTimeout too, for a rank whose peer may fail before joining.
std::string rank_env(int rank, int port, bool faulted_run) {
  const std::string env = torchrun_env(rank, 2, port);
  return faulted_run ? env + " CRUCIBLE_DIST_TIMEOUT=" + std::to_string(kTimeout) : env;
}

// One rank of a 2-rank run, started on construction with rank_env's variables and `command`
// (which writes or resumes `run`), that meets no fault; the other rank is the caller's to start
// with the same port.
class UnfaultedRank {
 public:
  UnfaultedRank(int rank, const std::string& command, const std::string& run, bool faulted_run)
      : rank_(rank),
        port_(free_port()),
        log_(run + ".rank" + std::to_string(rank) + ".log"),
        child_(rank_env(rank, port_, faulted_run) + " " + command, log_) {}
  int port() const { return port_; }
  // Waits up to kEndWithin seconds for the exit; fails the calling test when it does not come.
  int wait_exit() {
    const bool ended = wait_until([&] { return child_.exited(); }, kEndWithin);
    INFO("rank " << rank_ << ": " << read_file(log_));
    REQUIRE(ended);
    return child_.exit_code();
  }
  std::string output() const { return read_file(log_); }

 private:
  int rank_;
  int port_;
  std::string log_;
  Child child_;
};

// Runs command(run) on both ranks of a 2-rank run, rank `faulted` under the fault library
// with `fault` (tracing the calls it counts to `trace`) and the other unhindered; returns the
// faulted rank's result, and the other's exit code and output through `other`.
template <typename Command>
CommandResult run_pair(int faulted, const Command& command, const std::string& run,
                       const Fault& fault, const std::string& trace, CommandResult& other) {
  UnfaultedRank unfaulted(1 - faulted, command(run), run, fault.at > 0);
  CommandResult r = run_command(with_faults(
      rank_env(faulted, unfaulted.port(), fault.at > 0) + " " + command(run), run, fault, trace));
  other.exit_code = unfaulted.wait_exit();
  other.output = unfaulted.output();
  return r;
}

// Requires how the rank that met no fault ended when the `faulted` one ended as `faulted_result`
// says: as it did, when the faulted rank went on; with the chief's error passed on, when the chief
// failed while opening the run; otherwise exit 5, as a rank whose peer died or never joined.
void check_unfaulted_end(int faulted, const CommandResult& faulted_result, const Fault& fault,
                         const CommandResult& other) {
  const int unfaulted = 1 - faulted;
  INFO("rank " << unfaulted << ": " << other.output);
  CHECK(other.output.find("terminate called") == std::string::npos);
  if (faulted_result.exit_code == 0) {
    CHECK(other.exit_code == 0);
  } else if (faulted == 0 && other.exit_code == kExitTrainingFailed) {
    CHECK_THAT(other.output, Catch::Contains("error: rank 0 could not open the run: ") &&
                                 Catch::Contains(std::strerror(fault.error)));
  } else {
    CHECK(other.exit_code == kExitPeerLost);
    CHECK_THAT(
        other.output,
        Catch::Contains("error: ") && Catch::Contains(fmt::format("rank {}: ", unfaulted)) &&
            (Catch::Contains("a peer rank died, hangs or is unreachable") ||
             Catch::Contains(fmt::format("rank {} had not joined after {} s", faulted, kTimeout))));
  }
}

// Faults `fault` at one call of each site (at least `min_sites`) that rank `faulted` makes under
// the run directory in command(run), a 2-rank fit or resume of a run that prepare(run) makes.
// Requires of each: the faulted rank ends as a single process would (check_fault_outcome), the
// other as check_unfaulted_end says, both within kEndWithin of each other, and a plain resume
// (or rerun) on 2 slots ends bitwise identical to the reference.
template <typename Prepare, typename Command>
void fault_rank(const Runs& runs, int faulted, const Fault& fault, size_t min_sites,
                const Prepare& prepare, const Command& command) {
  const std::string traced = runs.tmp / "traced";
  prepare(traced);
  CommandResult other;
  const auto unfaulted_run =
      run_pair(faulted, command, traced, Fault{fault.kinds}, traced + ".trace", other);
  INFO(unfaulted_run.output);
  INFO(other.output);
  REQUIRE(unfaulted_run.exit_code == 0);
  REQUIRE(other.exit_code == 0);
  check_same_end(runs.reference, traced, kBatches);
  util::try_remove_all(traced);

  std::unique_ptr<UnfaultedRank> pending;
  fault_each_site(
      read_trace(traced + ".trace"), fault, min_sites, runs.tmp.path(),
      [&](const std::string& run) {
        prepare(run);
        pending = std::make_unique<UnfaultedRank>(1 - faulted, command(run), run, true);
      },
      [&](const std::string& run) {
        return rank_env(faulted, pending->port(), true) + " " + command(run);
      },
      [&](const std::string& run, const CommandResult& r) {
        check_fault_outcome(r, run, fault, run + "/trainer.log");
        const CommandResult ended{pending->wait_exit(), pending->output()};
        check_unfaulted_end(faulted, r, fault, ended);
        pending.reset();
        finish_after_fault(runs.reference, run, fit_command(runs, run), kBatches);
      });
}

// A 2-rank reference fit in runs.reference, run without the fault library.
void fit_reference(const Runs& runs) {
  const auto reference = run_command(fit_command(runs, runs.reference));
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);
}

// Faults `fault` on rank `faulted` of a fresh 2-rank fit, at each of at least `min_sites` sites.
void fault_fit(int faulted, const Fault& fault, size_t min_sites) {
  Runs runs;
  fit_reference(runs);
  const auto fit = [&](const std::string& run) { return fit_command(runs, run); };
  fault_rank(
      runs, faulted, fault, min_sites, [](const std::string&) {}, fit);
}

void fault_chief_fit(const Fault& fault) { fault_fit(0, fault, 10); }

// A 2-rank run that a full disk on the chief cut short while checkpoint 40 was being written:
// checkpoints 20 and 32.
std::string cut_short_run(const Runs& runs) {
  const std::string traced = runs.tmp / "traced-reference";
  const auto fit = [&](const std::string& run) { return fit_command(runs, run); };
  CommandResult other;
  REQUIRE(run_pair(0, fit, traced, Fault{full_disk().kinds}, traced + ".trace", other).exit_code ==
          0);
  Fault fault = full_disk();
  for (const TracedCall& call : read_trace(traced + ".trace")) {
    if (call.kind == "mkdir" && call.path.find(".tmp-batch-0000000040") != std::string::npos) {
      fault.at = call.number;
      break;
    }
  }
  REQUIRE(fault.at > 0);
  const std::string run = runs.tmp / "cut-short";
  const auto chief = run_pair(0, fit, run, fault, run + ".trace", other);
  INFO(chief.output);
  REQUIRE(chief.exit_code == 1);
  REQUIRE(other.exit_code == kExitPeerLost);
  REQUIRE(latest(run) == "batch-0000000032");
  return run;
}

// Faults `fault` on rank `faulted` of a 2-rank resume of a run cut short.
void fault_resume(int faulted, const Fault& fault, size_t min_sites) {
  Runs runs;
  fit_reference(runs);
  const std::string base = cut_short_run(runs);
  fault_rank(
      runs, faulted, fault, min_sites, [&](const std::string& run) { copy_tree(base, run); },
      resume_command);
}

}  // namespace

TEST_CASE(
    "a full disk anywhere on the chief of a 2-rank fit: both ranks end, the run resumes whole",
    "[dist][faults]") {
  fault_chief_fit(full_disk());
}

TEST_CASE(
    "an I/O error in any open, read or deletion on the chief of a 2-rank fit: both ranks end, "
    "the run resumes whole",
    "[dist][faults]") {
  fault_chief_fit(io_error());
}

// Rank 1 of a fresh fit writes nothing under the run directory and opens nothing there; it looks
// up whether the directory holds a run (config.yaml).
TEST_CASE(
    "a failed look-up of any path on rank 1 of a 2-rank fit: both ranks end, the run "
    "resumes whole",
    "[dist][faults]") {
  fault_fit(1, stat_error(), 1);
}

TEST_CASE(
    "an I/O error in any open, read or deletion on rank 1 of a 2-rank resume: both ranks end, "
    "the run resumes whole",
    "[dist][faults]") {
  fault_resume(1, io_error(), 3);
}

TEST_CASE(
    "a failed look-up of any path on rank 1 of a 2-rank resume: both ranks end, the run resumes "
    "whole",
    "[dist][faults]") {
  fault_resume(1, stat_error(), 3);
}

}  // namespace crucible::testing
