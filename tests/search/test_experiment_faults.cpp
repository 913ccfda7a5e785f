// Storage faults in the process that runs a search: its file-system calls under the experiment
// directory fail one at a time through tests/support/fault_injection.cpp (its trials, processes
// of their own, run unhindered). Whichever call fails, the search must end with a message naming
// the cause, and `trainer fit --resume` (or, before config.yaml exists, the same `trainer fit`)
// must end it with the trials, decisions and best checkpoint of a search that met no fault.

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

}  // namespace crucible::testing
