// Storage faults on the chief of a 2-rank fit. Rank 0, the only rank that writes the run
// directory, runs under tests/support/fault_injection.cpp with one of its calls under the run
// failing; rank 1 runs without it; both are started with torchrun's variables. Whichever call
// fails, both processes must end (neither waits for the other until the test's timeout), rank 0
// as a single process would (the cause and the path named, or a warning and a whole run), rank 1
// with rank 0's error when rank 0 failed while opening the run, and otherwise as a rank whose peer
// died, unless rank 0 went on, and a plain resume on 2 slots must finish the
// run bitwise identical to a 2-rank run that met no fault.

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
constexpr double kEndWithin = 60;  // seconds rank 1 may take to end after rank 0 did
const std::string kShort = " --set max_length.batches=48 --slots 2 --quiet";

struct Runs {
  TempDir tmp;
  std::string config = resumable_config(tmp, 0);
  std::string reference = tmp / "reference";
};

// `trainer fit` of the short run into `run` on 2 slots (the built-in launcher, or one rank of an
// outside launcher's when run with its variables).
std::string fit_command(const Runs& runs, const std::string& run) {
  return kTrainer + " fit " + runs.config + kShort + " --output " + run;
}

// Rank 1 of a 2-rank fit into `run`, started on construction with torchrun's variables; rank 0
// is the caller's to start with the same port.
class OtherRank {
 public:
  OtherRank(const Runs& runs, const std::string& run)
      : port_(free_port()),
        log_(run + ".rank1.log"),
        child_(torchrun_env(1, 2, port_) + " " + fit_command(runs, run), log_) {}
  int port() const { return port_; }
  // Waits up to kEndWithin seconds for the exit; fails the calling test when it does not come.
  int wait_exit() {
    const bool ended = wait_until([&] { return child_.exited(); }, kEndWithin);
    INFO("rank 1: " << read_file(log_));
    REQUIRE(ended);
    return child_.exit_code();
  }
  std::string output() const { return read_file(log_); }

 private:
  int port_;
  std::string log_;
  Child child_;
};

void fault_chief(const Fault& fault) {
  Runs runs;
  const auto reference = run_command(fit_command(runs, runs.reference));
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);

  // Rank 0's calls under a run that meets no fault.
  const std::string traced = runs.tmp / "traced";
  std::vector<TracedCall> calls;
  {
    OtherRank other(runs, traced);
    const auto chief =
        run_command(with_faults(torchrun_env(0, 2, other.port()) + " " + fit_command(runs, traced),
                                traced, Fault{fault.kinds}, traced + ".trace"));
    INFO(chief.output);
    REQUIRE(chief.exit_code == 0);
    REQUIRE(other.wait_exit() == 0);
    check_same_end(runs.reference, traced, kBatches);
    calls = read_trace(traced + ".trace");
  }

  std::unique_ptr<OtherRank> other;
  fault_each_site(
      calls, fault, 10, runs.tmp.path(),
      [&](const std::string& run) { other = std::make_unique<OtherRank>(runs, run); },
      [&](const std::string& run) {
        return torchrun_env(0, 2, other->port()) + " " + fit_command(runs, run);
      },
      [&](const std::string& run, const CommandResult& chief) {
        check_fault_outcome(chief, run, fault, run + "/trainer.log");
        const int code = other->wait_exit();
        const std::string output = other->output();
        INFO("rank 1: " << output);
        CHECK(output.find("terminate called") == std::string::npos);
        if (chief.exit_code == 0) {
          CHECK(code == 0);
        } else if (code == kExitTrainingFailed) {
          // Rank 0 failed before the ranks shared the run: it passed its error on.
          CHECK_THAT(output, Catch::Contains("error: rank 0 could not open the run: ") &&
                                 Catch::Contains(std::strerror(fault.error)));
        } else {
          CHECK(code == kExitPeerLost);
          CHECK_THAT(output, Catch::Contains("error: ") && Catch::Contains("rank 1: ") &&
                                 Catch::Contains("a peer rank died, hangs or is unreachable"));
        }
        other.reset();
        finish_after_fault(runs.reference, run, fit_command(runs, run), kBatches);
      });
}

}  // namespace

TEST_CASE(
    "a full disk anywhere on the chief of a 2-rank fit: both ranks end, the run resumes whole",
    "[dist][faults]") {
  fault_chief(full_disk());
}

TEST_CASE(
    "an I/O error in any open, read or deletion on the chief of a 2-rank fit: both ranks end, "
    "the run resumes whole",
    "[dist][faults]") {
  fault_chief(io_error());
}

}  // namespace crucible::testing
