// Storage faults at every place a run touches its directory: the real `trainer`, whose file-system
// calls under the run directory fail one at a time through tests/support/fault_injection.cpp.
// Whichever call fails, the process must end with a message naming the cause (or go on after a
// warning naming it, where that loses nothing), never crash, and leave a run that a plain resume
// (or, before config.yaml exists, a plain rerun) finishes bitwise identical to a run that met no
// fault.

#include <cstring>
#include <string>
#include <vector>

#include "catch.h"

#include "checkpoint/checkpoint.h"
#include "fault_injection.h"
#include "resumable_run.h"

namespace crucible::testing {
namespace {

constexpr int64_t kBatches = 48;  // 1.5 epochs: checkpoints at 20, 32, 40 and 48, one deleted
const std::string kShort = " --set max_length.batches=48";

using Runs = ResumableRuns;

// `trainer fit` of the short run into `run`.
std::string fit_command(const Runs& runs, const std::string& run) {
  return kTrainer + " fit " + runs.config + kShort + " --quiet --output " + run;
}

// Runs the reference fit under the library, failing nothing, and returns the calls `kinds` counts.
std::vector<TracedCall> traced_reference(const Runs& runs, const Fault& kinds) {
  const std::string trace = runs.tmp / "reference.trace";
  const auto fit = run_command(
      with_faults(fit_command(runs, runs.reference), runs.reference, Fault{kinds.kinds}, trace));
  INFO(fit.output);
  REQUIRE(fit.exit_code == 0);
  return read_trace(trace);
}

// Faults `fault` at one call of each site of `calls` in command(run), on a run directory made by
// prepare(run); then checks the outcome and the recovery.
template <typename Prepare, typename Command>
void fault_runs(const Runs& runs, const std::vector<TracedCall>& calls, const Fault& fault,
                const Prepare& prepare, const Command& command) {
  fault_each_site(calls, fault, 10, runs.tmp.path(), prepare, command,
                  [&](const std::string& run, const CommandResult& r) {
                    check_fault_outcome(r, run, fault, run + "/trainer.log");
                    finish_after_fault(runs.reference, run, fit_command(runs, run), kBatches);
                  });
}

void fault_fit(const Fault& fault) {
  Runs runs;
  const auto calls = traced_reference(runs, fault);
  fault_runs(
      runs, calls, fault, [](const std::string&) {},
      [&](const std::string& run) { return fit_command(runs, run); });
}

// A run cut short by a full disk as checkpoint 40 was being written: checkpoints 20 and 32, and
// reports up to batch 35 beyond them.
std::string cut_short_run(const Runs& runs, const std::vector<TracedCall>& reference_calls) {
  const std::string run = runs.tmp / "cut-short";
  int64_t at = 0;
  for (const TracedCall& call : reference_calls) {
    if (call.kind == "mkdir" && call.path.find(".tmp-batch-0000000040") != std::string::npos) {
      at = call.number;
      break;
    }
  }
  REQUIRE(at > 0);
  Fault fault = full_disk();
  fault.at = at;
  const auto fit = run_command(with_faults(fit_command(runs, run), run, fault, run + ".trace"));
  INFO(fit.output);
  REQUIRE(fit.exit_code == 1);
  REQUIRE(checkpoint::list(run) == std::vector<std::string>{run + "/checkpoints/batch-0000000020",
                                                            run + "/checkpoints/batch-0000000032"});
  REQUIRE(last_batches(run + "/metrics.jsonl", "training") == 35);
  return run;
}

void fault_resume(const Fault& fault) {
  Runs runs;
  const std::string base = cut_short_run(runs, traced_reference(runs, full_disk()));
  // The resume itself, traced without a fault, reaches the reference's end.
  const std::string traced = runs.tmp / "traced-resume";
  copy_tree(base, traced);
  const auto resumed = run_command(with_faults(kTrainer + " fit --resume " + traced + " --quiet",
                                               traced, Fault{fault.kinds}, traced + ".trace"));
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  check_same_end(runs.reference, traced, kBatches);
  fault_runs(
      runs, read_trace(traced + ".trace"), fault,
      [&](const std::string& run) { copy_tree(base, run); },
      [](const std::string& run) { return kTrainer + " fit --resume " + run + " --quiet"; });
}

// Faults `fault` at one call of each site of `trainer predict` of a finished run's last
// checkpoint, with the run and the output in the faulted directory.
void fault_predict(const Fault& fault) {
  Runs runs;
  const auto fit = run_command(fit_command(runs, runs.reference));
  INFO(fit.output);
  REQUIRE(fit.exit_code == 0);
  fault_single_output(
      runs.reference, runs.tmp.path(), fault, 5, "predictions.pt", [](const std::string& dir) {
        return kTrainer + " predict --checkpoint " + dir +
               "/run/checkpoints/batch-0000000048 --output " + dir + "/predictions.pt";
      });
}

}  // namespace

TEST_CASE("a full disk or an I/O error anywhere in a predict: the cause named, no partial output",
          "[checkpoint][faults]") {
  SECTION("a full disk") { fault_predict(full_disk()); }
  SECTION("an I/O error") { fault_predict(io_error()); }
  SECTION("a failed look-up") { fault_predict(stat_error()); }
}

TEST_CASE("a disk that fills up anywhere in a fit: the cause named, the run ends as if whole",
          "[checkpoint][faults]") {
  fault_fit(full_disk());
}

TEST_CASE(
    "an I/O error in any open, read or deletion of a fit: the cause named, the run ends "
    "as if whole",
    "[checkpoint][faults]") {
  fault_fit(io_error());
}

TEST_CASE("a disk that fills up anywhere in a resume: the cause named, the run ends as if whole",
          "[checkpoint][faults]") {
  fault_resume(full_disk());
}

TEST_CASE(
    "an I/O error in any open, read or deletion of a resume: the cause named, the run "
    "ends as if whole",
    "[checkpoint][faults]") {
  fault_resume(io_error());
}

TEST_CASE(
    "a look-up of any path of a fit or a resume that fails with an I/O error: the cause named, "
    "the run ends as if whole",
    "[checkpoint][faults]") {
  SECTION("a fit") { fault_fit(stat_error()); }
  SECTION("a resume") { fault_resume(stat_error()); }
}

}  // namespace crucible::testing
