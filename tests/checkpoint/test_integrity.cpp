// Damaged checkpoints: detected, reported by name, skipped in favour of an older good one.
#include "catch.h"

#include "checkpoint/checkpoint.h"
#include "damage.h"
#include "resumable_run.h"

using namespace crucible::testing;
namespace ckpt = crucible::checkpoint;

namespace {

// A finished ResumableTrial run (checkpoints 120 and 128 kept, plus the best) in `dir`.
std::string finished_run(const TempDir& dir) {
  auto r = run_command(kTrainer + " fit " + resumable_config(dir, 0) + " --quiet --output " +
                       (dir / "run"));
  REQUIRE(r.exit_code == 0);
  return dir / "run";
}

std::string damage_of(const std::string& checkpoint_dir) {
  try {
    ckpt::verify(checkpoint_dir);
  } catch (const ckpt::DamagedCheckpoint& e) {
    return e.what();
  }
  return "";
}

void flip_byte(const std::string& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x01));
}

}  // namespace

TEST_CASE("verification names what is wrong with a checkpoint", "[checkpoint]") {
  TempDir tmp;
  const std::string run = finished_run(tmp);
  const std::string last = run + "/checkpoints/batch-0000000128";
  CHECK(damage_of(last).empty());

  SECTION("a truncated file") {
    REQUIRE(::truncate((last + "/model_0.pt").c_str(), 100) == 0);
    CHECK_THAT(damage_of(last), Catch::Contains("model_0.pt has 100 bytes, metadata says"));
  }
  SECTION("a flipped byte") {
    flip_byte(last + "/optimizer_0.pt", 200);
    CHECK_THAT(damage_of(last), Catch::Contains("optimizer_0.pt fails its checksum"));
  }
  SECTION("a missing file") {
    util::remove(last + "/trial_state.pt");
    CHECK_THAT(damage_of(last), Catch::Contains("trial_state.pt is missing"));
  }
  SECTION("unreadable metadata") {
    write_file(last + "/metadata.json", "{\"files\": ");
    CHECK_THAT(damage_of(last),
               Catch::Contains("metadata.json is unreadable: not whole JSON (a syntax error at "
                               "byte ") &&
                   Catch::Contains("); the file is damaged or was cut short") &&
                   !Catch::Contains("last read"));
  }
  SECTION("no directory") {
    CHECK_THAT(damage_of(run + "/checkpoints/batch-0000000999"),
               Catch::Contains("no such directory"));
  }
}

TEST_CASE("metadata.json carries its own checksum: a damaged copy is refused or means the same",
          "[checkpoint]") {
  TempDir tmp;
  const std::string last = finished_run(tmp) + "/checkpoints/batch-0000000128";
  const std::string path = last + "/metadata.json";
  const std::string good = read_file(path);
  const nlohmann::json expected = ckpt::verify(last).to_json();
  int accepted = 0;
  const int refused =
      damaged_copies_refused<ckpt::DamagedCheckpoint>(good, last, 400, [&](const std::string& bad) {
        write_file(path, bad);
        const nlohmann::json read = ckpt::verify(last).to_json();
        // Only damage that leaves the JSON's content as written (blanks between tokens) passes.
        CHECK(read == expected);
        ++accepted;
      });
  CHECK(refused + accepted == 400);
  CHECK(refused >= 360);

  // One changed digit in a counter, the JSON still well-formed, is found by the checksum.
  std::string bumped = good;
  const auto at = bumped.find("\"batches\": 128");
  REQUIRE(at != std::string::npos);
  bumped.replace(at, 14, "\"batches\": 129");
  write_file(path, bumped);
  CHECK_THAT(damage_of(last), Catch::Contains("metadata.json fails its checksum"));

  // A checkpoint from before metadata carried a checksum still verifies.
  nlohmann::json older = nlohmann::json::parse(good);
  REQUIRE(older.erase("metadata_crc32") == 1);
  write_file(path, older.dump(2));
  CHECK(ckpt::verify(last).to_json() == expected);
}

TEST_CASE("resume falls back from a damaged newest checkpoint, with a warning", "[checkpoint]") {
  TempDir tmp;
  const std::string run = finished_run(tmp);
  flip_byte(run + "/checkpoints/batch-0000000128/model_0.pt", 300);
  // --quiet keeps reports off the console, not warnings.
  auto r = run_command(kTrainer + " fit --resume " + run + " --quiet");
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("warning: checkpoint") &&
                           Catch::Contains("batch-0000000128: model_0.pt fails its checksum") &&
                           Catch::Contains("falling back"));
  CHECK_THAT(r.output, !Catch::Contains("continuing from"));
  CHECK_THAT(read_file(run + "/trainer.log"),
             Catch::Contains("continuing from") && Catch::Contains("batch-0000000120"));
  // Training from 120 rewrote checkpoint 128 as the uninterrupted run had it.
  CHECK(ckpt::verify(run + "/checkpoints/batch-0000000128").batches == 128);
  // A checkpoint copied under a newer name holds an older batch: passed over, named.
  copy_tree(run + "/checkpoints/batch-0000000120", run + "/checkpoints/batch-0000000200");
  std::vector<std::string> warnings;
  CHECK(ckpt::newest_good(run, [&](const std::string& w) { warnings.push_back(w); }) ==
        run + "/checkpoints/batch-0000000128");
  REQUIRE(warnings.size() == 1);
  CHECK(warnings[0] ==
        "checkpoint " + run +
            "/checkpoints/batch-0000000200: it holds batch 120 (copied or renamed by "
            "hand?); falling back to an older checkpoint");
}

TEST_CASE(
    "a replacement cut short after the old checkpoint went is moved into place and one cut "
    "short while written is removed",
    "[checkpoint]") {
  TempDir tmp;
  const std::string run = finished_run(tmp);
  // As a file system without RENAME_EXCHANGE leaves a re-save killed between its removal of
  // batch 128 and its rename of the new one.
  const std::string dirs = run + "/checkpoints/";
  crucible::util::rename(dirs + "batch-0000000128", dirs + ".tmp-batch-0000000128");
  // A copy of 120 cut short while written (no metadata yet), where nothing was removed.
  REQUIRE(run_command("cp -r " + dirs + "batch-0000000120 " + dirs + ".tmp-batch-0000000136")
              .exit_code == 0);
  REQUIRE(::unlink((dirs + ".tmp-batch-0000000136/metadata.json").c_str()) == 0);
  std::vector<std::string> warnings;
  const auto removed =
      ckpt::remove_unfinished(run, [&](const std::string& w) { warnings.push_back(w); });
  CHECK(removed == std::vector<std::string>{dirs + ".tmp-batch-0000000136"});
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains("moved " + dirs + ".tmp-batch-0000000128 into place"));
  CHECK(ckpt::verify(dirs + "batch-0000000128").batches == 128);
  CHECK_FALSE(crucible::util::exists(dirs + ".tmp-batch-0000000136"));
  auto r = run_command(kTrainer + " fit --resume " + run);
  INFO(r.output);
  CHECK(r.exit_code == 0);
}

TEST_CASE("no good checkpoint is a clear error, not a crash loop", "[checkpoint]") {
  TempDir tmp;
  const std::string run = finished_run(tmp);
  for (const auto& dir : ckpt::list(run))
    REQUIRE(::truncate((dir + "/model_0.pt").c_str(), 10) == 0);
  auto r = run_command(kTrainer + " fit --resume " + run);
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.output, Catch::Contains("no checkpoint is loadable:"));
  // Each damaged one but the oldest falls back to an older one; the oldest has none to fall to.
  const size_t count = ckpt::list(run).size();
  REQUIRE(count >= 2);
  size_t fallbacks = 0;
  for (size_t at = r.output.find("falling back"); at != std::string::npos;
       at = r.output.find("falling back", at + 1)) {
    ++fallbacks;
  }
  CHECK(fallbacks == count - 1);
}

TEST_CASE("checkpoints removed by hand are named by latest, and a run's metrics are not given up",
          "[checkpoint]") {
  TempDir tmp;
  const std::string run = finished_run(tmp);
  const std::string dirs = run + "/checkpoints/";
  REQUIRE(ckpt::latest_name(run) == "batch-0000000128");
  crucible::util::remove_all(dirs + "batch-0000000128");
  // The newest left, with a warning naming what latest named.
  auto r = run_command(kTrainer + " fit --resume " + run);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("warning: " + run +
                                       "/latest names checkpoint batch-0000000128, which is no "
                                       "longer there (removed by hand?); using batch-0000000120"));
  CHECK(ckpt::latest_name(run) == "batch-0000000128");  // training from 120 wrote it again
  // Every checkpoint removed: neither --resume nor the same --output trains it from batch 0 over
  // its metrics.
  for (const auto& dir : ckpt::list(run)) crucible::util::remove_all(dir);
  const std::string metrics = read_file(run + "/metrics.jsonl");
  for (const std::string& args :
       {"fit --resume " + run, "fit " + resumable_config(tmp, 0) + " --output " + run}) {
    auto refused = run_command(kTrainer + " " + args);
    INFO(refused.output);
    CHECK(refused.exit_code == 2);
    CHECK_THAT(refused.output,
               Catch::Contains(run + ": its checkpoints were removed (latest names "
                                     "batch-0000000128, which is not there)") &&
                   Catch::Contains("remove " + run + "/latest to train this one again"));
  }
  CHECK(read_file(run + "/metrics.jsonl") == metrics);
  CHECK_THAT(run_command(kTrainer + " validate --checkpoint " + run).output,
             Catch::Contains("the run has no checkpoint left (its file latest names "
                             "batch-0000000128, which was removed)"));
  // As asked: without latest, the run trains again from batch 0.
  crucible::util::remove_all(run + "/latest");
  auto again = run_command(kTrainer + " fit --resume " + run);
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.output, Catch::Contains("training from the beginning"));
}

TEST_CASE("a checkpoint of another trial, or of other shapes, is refused by name", "[checkpoint]") {
  TempDir tmp;
  const std::string run = finished_run(tmp);
  const std::string last = run + "/checkpoints/batch-0000000128";
  auto model = resumable_model();
  ckpt::Contents other;
  other.models = {model.ptr()};
  other.trial_class = "SomeOtherTrial";
  CHECK_THROWS_WITH(ckpt::load(last, other),
                    Catch::Contains("was written by trial class 'ResumableTrial', not "
                                    "'SomeOtherTrial'"));
  auto narrow =
      torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::ReLU(), torch::nn::Dropout(0.2),
                            torch::nn::Linear(16, 1), torch::nn::Linear(1, 1));
  CHECK_THROWS_WITH(ckpt::load_weights(last, {narrow.ptr()}),
                    Catch::Contains("does not match the model") &&
                        Catch::Contains("shape of 0.weight: checkpoint [32, 8], model [16, 8]") &&
                        Catch::Contains("missing 4.weight [1, 1]"));
  CHECK_NOTHROW(ckpt::load_weights(last, {model.ptr()}));
}

TEST_CASE("a full disk stops training with a clear error: the previous checkpoint loads",
          "[checkpoint]") {
  TempDir tmp;
  const std::string run = tmp / "run";
  const std::string config = resumable_config(tmp, 0, "");
  auto first = run_command(kTrainer + " fit " + config + " --quiet --output " + run +
                           " --set max_length.batches=20 --set hyperparameters.hidden=512");
  REQUIRE(first.exit_code == 0);
  // Files may not grow past 16 kB: the next checkpoint's model file cannot be written.
  auto full = run_command("prlimit --fsize=16000 -- " + kTrainer + " fit --resume " + run +
                          " --allow-safe-changes --set max_length.batches=40");
  INFO(full.output);
  CHECK(full.exit_code == 1);
  CHECK_THAT(full.output, Catch::Contains("error: cannot write checkpoint " + run +
                                          "/checkpoints/batch-0000000032") &&
                              Catch::Contains("File too large"));
  CHECK(latest(run) == "batch-0000000020");
  CHECK_NOTHROW(ckpt::verify(run + "/checkpoints/batch-0000000020"));
  for (const auto& name : util::list_directory(run + "/checkpoints")) {
    CHECK(name.rfind(".tmp-", 0) != 0);  // no debris left
  }
  // With room again, the run continues from the checkpoint that was already there, with the
  // change accepted before: a plain --resume, as the advice says.
  auto resumed = run_command(kTrainer + " fit --resume " + run);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output,
             Catch::Contains("continuing from") && Catch::Contains("batch-0000000020 at batch 20"));
  CHECK(latest(run) == "batch-0000000040");
}

TEST_CASE("a misspelled searcher.metric is renamed on resume while the run has no best value",
          "[checkpoint]") {
  TempDir tmp;
  const std::string run = tmp / "run";
  const auto first = run_command(kTrainer + " fit " + kConfigs + "/linear.yaml --quiet --output " +
                                 run + " --set searcher.metric=validation_lsos");
  INFO(first.output);
  CHECK(first.exit_code == 2);
  CHECK_THAT(first.output, Catch::Contains("the training so far is in checkpoint " + run +
                                           "/checkpoints/batch-0000000063"));
  const auto unaccepted =
      run_command(kTrainer + " fit --resume " + run + " --set searcher.metric=validation_loss");
  CHECK(unaccepted.exit_code == 2);
  CHECK_THAT(unaccepted.output,
             Catch::Contains("searcher.metric: validation_lsos -> validation_loss\nThese "
                             "changes are safe; pass --allow-safe-changes"));
  const auto mended = run_command(kTrainer + " fit --resume " + run +
                                  " --set searcher.metric=validation_loss --allow-safe-changes");
  INFO(mended.output);
  CHECK(mended.exit_code == 0);
  CHECK_THAT(read_file(run + "/trainer.log"), Catch::Contains("at batch 63"));
  CHECK(latest(run) == "batch-0000000252");
  // As the run with the right name from the start: its rows, and its best (batch 63's).
  const std::string right = tmp / "right";
  REQUIRE(run_command(kTrainer + " fit " + kConfigs + "/linear.yaml --quiet --output " + right)
              .exit_code == 0);
  CHECK(read_file(run + "/metrics.jsonl") == read_file(right + "/metrics.jsonl"));
  const auto best = [](const std::string& r) {
    return ckpt::verify(r + "/checkpoints/batch-0000000252").trainer_state.best_metric;
  };
  REQUIRE(best(right).has_value());
  CHECK(best(run) == best(right));
  // With a best value recorded, the metric ranks the checkpoints: it stays.
  const auto ranked = run_command(kTrainer + " fit --resume " + run +
                                  " --set searcher.metric=validation_bias --allow-safe-changes");
  CHECK(ranked.exit_code == 2);
  CHECK_THAT(ranked.output,
             Catch::Contains("searcher.metric: validation_loss -> validation_bias  (unsafe)"));
}

TEST_CASE("resuming with a changed config is refused, listing the changes", "[checkpoint]") {
  TempDir tmp;
  const std::string run = tmp / "run";
  REQUIRE(run_command(kTrainer + " fit " + resumable_config(tmp, 0) + " --quiet --output " + run +
                      " --set max_length.batches=20")
              .exit_code == 0);
  auto unsafe = run_command(kTrainer + " fit --resume " + run +
                            " --set hyperparameters.hidden=64 --set max_length.batches=30");
  CHECK(unsafe.exit_code == 2);
  CHECK_THAT(unsafe.output, Catch::Contains("hyperparameters.hidden: 32 -> 64  (unsafe)") &&
                                Catch::Contains("max_length.batches: 20 -> 30"));
  auto safe = run_command(kTrainer + " fit --resume " + run + " --set max_length.batches=30");
  CHECK(safe.exit_code == 2);
  CHECK_THAT(safe.output, Catch::Contains("pass --allow-safe-changes"));
  auto allowed = run_command(kTrainer + " fit --resume " + run +
                             " --set max_length.batches=30 --allow-safe-changes");
  INFO(allowed.output);
  CHECK(allowed.exit_code == 0);
  CHECK(latest(run) == "batch-0000000030");
  CHECK_THAT(read_file(run + "/config.yaml"), Catch::Contains("max_length: {batches: 30}"));
  // At its max_length, a resume says so; past it (a shorter one accepted), too.
  auto done = run_command(kTrainer + " fit --resume " + run);
  CHECK(done.exit_code == 0);
  CHECK_THAT(done.output, Catch::Contains("the run had trained its max_length (30 batches): "
                                          "nothing left to train. To train it longer: trainer fit "
                                          "--resume " +
                                          run + " --set max_length.batches=N"));
  auto past = run_command(kTrainer + " fit --resume " + run +
                          " --set max_length.batches=20 --allow-safe-changes");
  CHECK(past.exit_code == 0);
  CHECK_THAT(past.output,
             Catch::Contains("the run is at batch 30, past its max_length (20 batches)"));
  CHECK(latest(run) == "batch-0000000030");
  // The checkpoint's config is the reference for unsafe changes, even made by hand in config.yaml.
  const std::string yaml = read_file(run + "/config.yaml");
  const std::string hidden = "hidden: 32";
  REQUIRE(yaml.find(hidden) != std::string::npos);
  write_file(run + "/config.yaml", yaml.substr(0, yaml.find(hidden)) + "hidden: 48" +
                                       yaml.substr(yaml.find(hidden) + hidden.size()));
  auto edited = run_command(kTrainer + " fit --resume " + run + " --allow-safe-changes");
  CHECK(edited.exit_code == 2);
  CHECK_THAT(edited.output, Catch::Contains("hyperparameters.hidden: 32 -> 48  (unsafe)"));
}
