#include <set>

#include <fmt/format.h>
#include "catch.h"

#include <crucible/errors.h>

#include "checkpoint/checkpoint.h"
#include "checkpoint/retention.h"
#include "resumable_run.h"
#include "train/checkpoint_path.h"

using crucible::checkpoint::Entry;
using crucible::checkpoint::to_delete;
using namespace crucible::testing;
using S = std::vector<std::string>;

TEST_CASE("retention keeps the union of the newest and the best", "[checkpoint]") {
  const std::vector<Entry> entries = {
      {"a", 10, 0.5}, {"b", 20, 0.2}, {"c", 30, std::nullopt}, {"d", 40, 0.9}, {"e", 50, 0.4}};
  CHECK(to_delete(entries, 1, 1, true) == S{"d", "c", "a"});   // keeps e (newest), b (best)
  CHECK(to_delete(entries, 2, 2, true) == S{"c", "a"});        // keeps e, d; b, e
  CHECK(to_delete(entries, 1, 1, false) == S{"c", "b", "a"});  // keeps e, d (best if larger)
  CHECK(to_delete(entries, 0, 0, true) == S{"d", "c", "a"});   // newest and best survive 0
  CHECK(to_delete(entries, 10, 10, true).empty());
  CHECK(to_delete({}, 1, 1, true).empty());
  // The newest validated to NaN (metadata.json reads any non-finite value back so) or, held in
  // memory, to an infinite loss: the best stays; NaN ranks nowhere, an infinity as what it is.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  CHECK(to_delete({{"a", 10, 0.3}, {"b", 20, 0.5}, {"c", 30, nan}}, 1, 1, true) == S{"b"});
  CHECK(to_delete({{"a", 10, 0.3}, {"b", 20, 0.5}, {"c", 30, inf}}, 1, 1, true) == S{"b"});
  CHECK(to_delete({{"a", 10, 0.3}, {"b", 20, 0.5}, {"c", 30, inf}}, 1, 1, false) == S{"b", "a"});
}

TEST_CASE("retention leaves checkpoints past the run's batch alone and keeps the one just written",
          "[checkpoint]") {
  // Resumed from batch 100 as batch 200's model file was damaged, the run is stopped at 120: 200
  // is an earlier attempt's, newer by batch only; counted, it would make 120 and 100 go.
  const std::vector<Entry> entries = {
      {"b100", 100, std::nullopt}, {"b120", 120, std::nullopt}, {"b200", 200, std::nullopt}};
  CHECK(to_delete(entries, 1, 1, true) == S{"b120", "b100"});
  CHECK(to_delete(entries, 1, 1, true, 120) == S{"b100"});
  CHECK(to_delete(entries, 1, 1, true, 200) == S{"b120", "b100"});  // reached: replaced
}

TEST_CASE("a run keeps exactly the configured checkpoints, the best among them", "[checkpoint]") {
  TempDir tmp;
  auto r = run_command(kTrainer + " fit " + resumable_config(tmp, 0, "") + " --quiet --output " +
                       (tmp / "run") + " --set checkpoint_storage.save_trial_latest=2");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::vector<std::string> kept;
  for (const auto& name : util::list_directory(tmp / "run/checkpoints")) {
    kept.push_back(name);
  }
  std::sort(kept.begin(), kept.end());
  // Newest two: 120, 128. Best validation_loss among validated checkpoints (32, 64, 96, 128):
  // whichever it is, it is kept, and nothing else.
  auto rows = read_metrics(tmp / "run/metrics.jsonl");
  double best = 1e9;
  int64_t best_at = -1;
  for (const auto& row : rows) {
    if (row["type"] == "validation" && row["metrics"]["validation_loss"].get<double>() < best) {
      best = row["metrics"]["validation_loss"].get<double>();
      best_at = row["batches"].get<int64_t>();
    }
  }
  std::set<std::string> expected = {"batch-0000000120", "batch-0000000128",
                                    fmt::format("batch-{:010d}", best_at)};
  CHECK(std::set<std::string>(kept.begin(), kept.end()) == expected);
  CHECK(latest(tmp / "run") == "batch-0000000128");
}

TEST_CASE(
    "a pinned checkpoint is not deleted, and a resolved one deleted meanwhile is resolved again",
    "[checkpoint]") {
  TempDir tmp;
  const std::string a = tmp / "checkpoints/batch-0000000020";
  const std::string b = tmp / "checkpoints/batch-0000000040";
  util::create_directories(a);
  util::create_directories(b);
  write_file(a + "/metadata.json", "{}");
  {
    const auto pinned = crucible::checkpoint::pin(a);
    REQUIRE(pinned);
    const auto again = crucible::checkpoint::pin(a);  // pins share
    CHECK(again);
    CHECK_FALSE(crucible::checkpoint::remove(a));
    CHECK(util::exists(a + "/metadata.json"));
  }
  CHECK(crucible::checkpoint::remove(a));
  CHECK_FALSE(util::exists(a));
  CHECK_FALSE(crucible::checkpoint::pin(a));  // gone: no pin, no error
  // A file, or a path through one, is no checkpoint to pin either: verify() names it.
  write_file(tmp / "file", "x");
  CHECK_FALSE(crucible::checkpoint::pin(tmp / "file"));
  CHECK_FALSE(crucible::checkpoint::pin(tmp / "file/batch-0000000020"));

  // A lock on a directory that is then renamed holds it under its new name only: a pin that
  // waited while its checkpoint was being deleted finds it gone.
  const auto lock = util::FileLock::lock_directory_shared(b);
  util::rename(b, tmp / "moved");
  CHECK_FALSE(lock->holds(b));
  CHECK(lock->holds(tmp / "moved"));
  util::rename(tmp / "moved", b);

  // The resolver's first answer was deleted before it was pinned; its second holds.
  int calls = 0;
  const crucible::train::PinnedCheckpoint c =
      crucible::train::pin_resolved([&] { return ++calls == 1 ? a : b; });
  CHECK(calls == 2);
  CHECK(c.dir == b);
  REQUIRE(c.pin);
  CHECK_FALSE(crucible::checkpoint::remove(b));
  CHECK(crucible::train::pin_resolved([] { return std::string(); }).dir.empty());
  const auto deleted = [&] { return a; };
  CHECK_THROWS_AS(crucible::train::pin_resolved(deleted), crucible::TrainingError);
  CHECK_THROWS_WITH(
      crucible::train::pin_resolved(deleted),
      "checkpoint " + a +
          " was deleted before it could be read: the run that wrote it is still training, and "
          "its retention (checkpoint_storage.save_trial_latest) removed it; name the run "
          "directory to read its newest checkpoint");
}

TEST_CASE(
    "retention keeps a checkpoint that another process pins, and deletes it after the pin is "
    "released",
    "[checkpoint]") {
  TempDir tmp;
  const std::string config = resumable_config(tmp, 0);
  const std::string run = tmp / "run";
  const std::string first = run + "/checkpoints/batch-0000000020";
  const auto fit = run_command(kTrainer + " fit " + config + " --quiet --output " + run +
                               " --set max_length.batches=20 --set "
                               "checkpoint_storage.save_trial_latest=1");
  INFO(fit.output);
  REQUIRE(fit.exit_code == 0);
  const std::string resume = kTrainer + " fit --resume " + run + " --quiet --allow-safe-changes";
  {
    const auto pinned = crucible::checkpoint::pin(first);
    REQUIRE(pinned);
    const auto more = run_command(resume + " --set max_length.batches=64");
    INFO(more.output);
    REQUIRE(more.exit_code == 0);
    // Validated at 20, 32 and 64; the newest and the best are kept, and the pinned one.
    double loss_at_20 = 0, best = 1e9;
    for (const auto& row : read_metrics(run + "/metrics.jsonl")) {
      if (row["type"] != "validation") continue;
      const double loss = row["metrics"]["validation_loss"].get<double>();
      if (row["batches"] == 20) loss_at_20 = loss;
      best = std::min(best, loss);
    }
    REQUIRE(loss_at_20 > best);  // retention would have deleted it
    CHECK(util::exists(first + "/metadata.json"));
    CHECK(util::exists(first + ".to-delete"));
    CHECK_THAT(read_file(run + "/trainer.log"),
               Catch::Contains("kept " + first +
                               " for now: another process is reading it (trainer validate, "
                               "predict or a warm start), and deletes it when done"));
  }
  // The run had ended: the reader deletes it as it lets it go.
  CHECK_FALSE(util::exists(first));
  CHECK_FALSE(util::exists(first + ".to-delete"));
  const auto rest = run_command(resume + " --set max_length.batches=80");
  INFO(rest.output);
  REQUIRE(rest.exit_code == 0);
  CHECK_FALSE(util::exists(first));
  CHECK(latest(run) == "batch-0000000080");
}

TEST_CASE(
    "a resume drops the deletion a pinned checkpoint left for its reader: the resumed run's "
    "retention decides again",
    "[checkpoint]") {
  TempDir tmp;
  const std::string run = tmp / "run";
  const std::string fit = kTrainer + " fit " + resumable_config(tmp, 0) + " --quiet --output " +
                          run +
                          " --set checkpoint_policy=all --set min_checkpoint_period.batches=10 "
                          "--set checkpoint_storage.save_trial_latest=1";
  const auto first = run_command(fit + " --set max_length.batches=10");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const std::string at_10 = run + "/checkpoints/batch-0000000010";
  const std::string resume = kTrainer + " fit --resume " + run + " --quiet --allow-safe-changes";
  auto pinned = crucible::checkpoint::pin(at_10);
  REQUIRE(pinned);
  // Retention keeps the newest (and the best, the newest here): batch 10 would go.
  const auto second = run_command(resume + " --set max_length.batches=20");
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  REQUIRE(util::exists(at_10 + ".to-delete"));
  // Resumed to keep 5, the run keeps it: the request no longer stands, though made under the
  // run's former setting (before, the reader deleted it when done, or the resume did).
  const auto third = run_command(
      resume + " --set max_length.batches=30 --set checkpoint_storage.save_trial_latest=5");
  INFO(third.output);
  REQUIRE(third.exit_code == 0);
  CHECK_FALSE(util::exists(at_10 + ".to-delete"));
  CHECK(crucible::checkpoint::list(run).size() == 3);
  pinned.reset();
  CHECK(util::exists(at_10 + "/metadata.json"));
}
