// What the search reads back from a trial's run: the length a segment reached and its metric.
#include "catch.h"

#include "files.h"
#include "search/trial_process.h"
#include "util/file_system.h"

using crucible::LengthUnit;
using namespace crucible::testing;
namespace search = crucible::search;

TEST_CASE("a segment's length counts the whole units its run reached", "[search]") {
  TempDir tmp;
  const search::TrialFiles files(tmp.path(), 1);
  crucible::util::create_directories(files.run_dir);
  // A run that stopped itself 0.6 epochs in, at batch 6.
  write_file(files.run_dir + "/metrics.jsonl",
             R"({"type":"validation","batches":6,"epochs":0.6,"records":192,"metrics":{"loss":0.5}}
{"type":"stopped","reason":"early stopping: loss did not improve"}
)");
  const auto in_epochs =
      search::read_segment_result(files, 1, {LengthUnit::kEpochs, 1}, "loss", true);
  CHECK(in_epochs.length == 0);  // it has not reached epoch 1: a rung of 1 epoch is not its
  CHECK(in_epochs.ended_early == "early stopping: loss did not improve");
  CHECK(in_epochs.metric == 0.5);
  const auto in_batches =
      search::read_segment_result(files, 1, {LengthUnit::kBatches, 6}, "loss", true);
  CHECK(in_batches.length == 6);
  CHECK(in_batches.ended_early.empty());
  CHECK(search::reached_length(files, LengthUnit::kEpochs) == 0);
  CHECK(search::reached_length(files, LengthUnit::kBatches) == 6);
}

TEST_CASE("a failed trial's error keeps the launcher's tail of the failed rank", "[search]") {
  TempDir tmp;
  const std::string log = tmp / "trainer.log";
  write_file(log,
             "[rank 0] batch 3\n"
             "error: rank 1 was killed by signal 9 (Killed); the other ranks were stopped. Rank "
             "1's last lines:\n"
             "  [rank 1] batch 3\n"
             "  [rank 1] warning: slow\n"
             "\n");
  CHECK(search::last_error(log) ==
        "rank 1 was killed by signal 9 (Killed); the other ranks were stopped. Rank 1's last "
        "lines: [rank 1] batch 3 [rank 1] warning: slow");
  // Lines after the error that are not its tail are left out; without an error, the last line.
  write_file(log, "error: first\n  its tail\n   \nlater line\n  indented, but not the error's\n");
  CHECK(search::last_error(log) == "first its tail");
  write_file(log, "a\nb\n");
  CHECK(search::last_error(log) == "b");
  write_file(log, "a\nb\nwarning: checkpoint x fails its checksum; falling back\n");
  CHECK(search::last_error(log) == "b");
}
