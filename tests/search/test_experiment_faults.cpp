// Storage faults in the process that runs a search: its file-system calls under the experiment
// directory fail one at a time through tests/support/fault_injection.cpp (its trials, processes
// of their own, run unhindered). Whichever call fails, the search must end with a message naming
// the cause, and `trainer fit --resume` (or, before config.yaml exists, the same `trainer fit`)
// must end it with the trials, decisions and best checkpoint of a search that met no fault.

#include <algorithm>
#include <string>
#include <vector>

#include "catch.h"

#include "fault_injection.h"
#include "search_runs.h"

namespace crucible::testing {
namespace {

// Faults `fault` at one call of each site of a 2-trial grid search's own process.
void fault_search(const Fault& fault) {
  TempDir tmp;
  const std::string config =
      search_config(tmp, "{name: grid, metric: validation_loss, max_concurrent_trials: 1}",
                    "lr: 0.05, hidden: {type: categorical, vals: [4, 8]}");
  const auto command = [&](const std::string& exp) {
    return kTrainer + " fit " + config + " --output " + exp;
  };
  const std::string reference = tmp / "reference";
  const auto traced = run_command(
      with_faults(command(reference), reference, Fault{fault.kinds}, reference + ".trace"));
  INFO(traced.output);
  REQUIRE(traced.exit_code == 0);
  const std::string best = trimmed(read_file(reference + "/best"));
  REQUIRE(best == "trials/1/checkpoints/batch-0000000016");
  fault_each_site(
      read_trace(reference + ".trace"), fault, 5, tmp.path(), [](const std::string&) {}, command,
      [&](const std::string& exp, const CommandResult& r) {
        check_fault_outcome(r, exp, fault, exp + "/experiment.log");
        const bool holds_search = util::exists(exp + "/config.yaml");
        const auto again =
            run_command(holds_search ? kTrainer + " fit --resume " + exp : command(exp));
        INFO((holds_search ? "resumed: " : "rerun: ") + again.output);
        REQUIRE(again.exit_code == 0);
        CHECK(decisions(rows_of(exp)) == decisions(rows_of(reference)));
        CHECK(trimmed(read_file(exp + "/best")) == best);
      });
}

}  // namespace

TEST_CASE(
    "a disk that fills up anywhere in a search: the cause named, the search resumes to "
    "the same trials and best",
    "[search][faults]") {
  fault_search(full_disk());
}

TEST_CASE(
    "an I/O error in any open, read or deletion of a search: the cause named, the search "
    "resumes to the same trials and best",
    "[search][faults]") {
  fault_search(io_error());
}

TEST_CASE(
    "a look-up of any path of a search that fails with an I/O error: the cause named, the "
    "search resumes to the same trials and best",
    "[search][faults]") {
  fault_search(stat_error());
}

TEST_CASE("a search that fails while a trial trains stops that trial before it exits",
          "[search][faults]") {
  TempDir tmp;
  // Two trials at once on the CPUs (not one per GPU), started together: the first trains for
  // 16 x 100 ms, the second for 16 x 600 ms, so it is well into training when the first ends.
  const std::string config =
      search_config(tmp, "{name: grid, metric: validation_loss, max_concurrent_trials: 2}",
                    "lr: 0.05, sleep_ms: {type: categorical, vals: [100, 600]}");
  const auto command = [&](const std::string& exp) {
    return "CUDA_VISIBLE_DEVICES= " + kTrainer + " fit " + config + " --output " + exp;
  };
  const Fault full{"create,write", ENOSPC, true};
  const std::string reference = tmp / "reference";
  const auto traced =
      run_command(with_faults(command(reference), reference, full, reference + ".trace"));
  INFO(traced.output);
  REQUIRE(traced.exit_code == 0);
  // The first row the search writes after it started trial 2: trial 1's result.
  const std::vector<TracedCall> calls = read_trace(reference + ".trace");
  const auto started = std::find_if(calls.begin(), calls.end(), [&](const TracedCall& c) {
    return c.kind == "create" && c.path == reference + "/trials/2.log";
  });
  REQUIRE(started != calls.end());
  const auto row = std::find_if(started, calls.end(), [&](const TracedCall& c) {
    return c.kind == "write" && c.path == reference + "/experiment.jsonl";
  });
  REQUIRE(row != calls.end());
  Fault fault = full;
  fault.at = row->number;
  const std::string exp = tmp / "exp";
  const auto r = run_command(with_faults(command(exp), exp, fault, exp + ".trace"));
  INFO(r.output);
  CHECK(failed_call(exp + ".trace") == "write " + exp + "/experiment.jsonl");
  check_fault_outcome(r, exp, fault, exp + "/experiment.log");
  CHECK(r.exit_code != 0);
  // Trial 2 was told to stop (SIGTERM: a checkpoint, exit 4) and waited for: nothing of the
  // search runs on ("[t]" keeps the pattern from matching the shell that runs pgrep), and the
  // trial's log tells of the stop.
  CHECK(run_command("pgrep -f '" + exp + "/[t]rials'").exit_code == 1);
  CHECK_THAT(read_file(exp + "/trials/2/trainer.log"), Catch::Contains("received Terminated"));
}

}  // namespace crucible::testing
