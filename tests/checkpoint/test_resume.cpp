// Kill a real `trainer fit` at chosen moments, resume it, and demand the uninterrupted result.
#include <csignal>
#include <functional>

#include "checkpoint/checkpoint.h"
#include "resumable_run.h"

using namespace crucible::testing;

namespace {

struct Reference {
  TempDir dir;
  std::string run;
  Reference() : run(dir / "run") {
    auto r =
        run_command(kTrainer + " fit " + resumable_config(dir, 0) + " --quiet --output " + run);
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
  }
};

// One shared uninterrupted run.
const Reference& reference() {
  static Reference ref;
  return ref;
}

// Resumes `run` to its end, checks it against the reference, returns the resumed output.
std::string resume_and_compare(const std::string& run) {
  const std::string output = resume_run(run);
  check_same_end(reference().run, run);
  for (const auto& name : util::list_directory(run + "/checkpoints")) {
    CHECK(name.rfind(".tmp-", 0) != 0);
  }
  return output;
}

}  // namespace

TEST_CASE("the uninterrupted reference run is deterministic", "[checkpoint][resume]") {
  TempDir tmp;
  auto r = run_command(kTrainer + " fit " + resumable_config(tmp, 0) + " --quiet --output " +
                       (tmp / "run"));
  REQUIRE(r.exit_code == 0);
  check_same_end(reference().run, tmp / "run");
}

TEST_CASE("SIGKILL at any moment, then --resume, ends bitwise identical", "[checkpoint][resume]") {
  // Checkpoints of the run: 20, 32 (validation), 40, 60, 64 (validation), 80, 96 (validation),
  // 100, 120, 128. At 20 ms a batch, each moment below lasts a few hundred milliseconds.
  reference();
  TempDir tmp;
  const std::string run = tmp / "run";
  std::string slow_save;  // a --set making every checkpoint slow to write
  std::function<bool()> moment;
  std::string resumes_from;  // the newest checkpoint when the kill lands
  bool cut_short = false;    // whether the kill cuts the writing of checkpoint 80 short
  SECTION("mid-epoch, batches after the last checkpoint") {
    moment = [&] { return last_batches(run + "/metrics.jsonl", "training") >= 49; };
    resumes_from = "batch-0000000040";
  }
  SECTION("right after a checkpoint is published") {
    moment = [&] { return latest(run) == "batch-0000000040"; };
    resumes_from = "batch-0000000040";
  }
  SECTION("while a checkpoint is being written") {
    slow_save = " --set hyperparameters.save_delay_ms=500";
    moment = [&] { return util::exists(run + "/checkpoints/.tmp-batch-0000000080"); };
    resumes_from = "batch-0000000064";
    cut_short = true;
  }
  {
    Child child(
        kTrainer + " fit " + resumable_config(tmp, 20) + slow_save + " --quiet --output " + run,
        tmp / "log");
    REQUIRE(wait_until(moment));
    child.signal(SIGKILL);
    CHECK(child.wait() == 128 + SIGKILL);
  }
  REQUIRE(crucible::checkpoint::list(run).back() == run + "/checkpoints/" + resumes_from);
  REQUIRE(util::exists(run + "/checkpoints/.tmp-batch-0000000080") == cut_short);
  const std::string resumed = resume_and_compare(run);
  if (cut_short) {
    CHECK_THAT(resumed, Catch::Contains("removed " + run +
                                        "/checkpoints/.tmp-batch-0000000080, "
                                        "a checkpoint whose writing or deletion was cut short"));
  }
}

namespace {

// A run with `precision` autocast, warm-up, clipping and early stopping, SIGKILLed and resumed,
// must end as the uninterrupted run. Early stopping counts a falling loss as no improvement:
// validations at 32 (the best), 64 and 96 (patience 2) stop the run at batch 96. The kill lands
// after checkpoint 80, whose state holds one validation without improvement, the warm-up
// schedule, the clipped Adam state and, with fp16, the loss scaler's.
void kill_and_resume_with(const std::string& precision) {
  const std::string features = R"(optimizations:
  mixed_precision: )" + precision +
                               R"(
  gradient_clipping: {max_norm: 0.5}
early_stopping: {metric: loss, smaller_is_better: false, patience: 2}
)";
  const std::string sets = " --set hyperparameters.warmup=10 --quiet --output ";
  TempDir tmp;
  const std::string reference = tmp / "reference";
  auto r = run_command(kTrainer + " fit " + resumable_config(tmp, 0, features) + sets + reference);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const auto rows = read_metrics(reference + "/metrics.jsonl");
  REQUIRE(rows.back()["type"] == "stopped");
  REQUIRE(rows.back()["batches"] == 96);
  const std::string run = tmp / "run";
  kill_after_report(kTrainer + " fit " + resumable_config(tmp, 20, features) + sets + run, run,
                    tmp / "log", 84, "batch-0000000080");
  resume_run(run);
  check_same_end(reference, run, 96);
  CHECK_THAT(read_file(run + "/trainer.log"),
             Catch::Contains("stopping at batch 96: early stopping: loss did not improve"));
  // Its final checkpoint, written at the validation the stop came from, records the stop: a
  // later resume trains nothing more.
  CHECK_THAT(resume_run(run), Catch::Contains("the run stopped early at batch 96 (early stopping"));
  check_same_end(reference, run, 96);
}

}  // namespace

TEST_CASE(
    "with bf16 autocast, warm-up, clipping and early stopping, SIGKILL then --resume "
    "ends bitwise identical",
    "[checkpoint][resume]") {
  kill_and_resume_with("bf16");
}

TEST_CASE(
    "fp16 with the loss scaler on CUDA, warm-up, clipping and early stopping, SIGKILL then "
    "--resume ends bitwise identical",
    "[checkpoint][resume][cuda]") {
  if (!torch::cuda::is_available()) {
    // fp16 needs CUDA: without it the run is refused before it starts (tests/train/test_amp.cpp
    // checks the message), and what this case checks runs on a GPU machine only.
    TempDir tmp;
    const auto r = run_command(kTrainer + " check " + resumable_config(tmp, 0) +
                               " --set optimizations.mixed_precision=fp16");
    CHECK(r.exit_code == crucible::kExitBadUsage);
    return;
  }
  kill_and_resume_with("fp16");
}

namespace {

// Windows of 3 batches: checkpoints 20, 32, 40, 64, 80, 100, 128 fall inside one (the kill leaves
// 40, after its window's first batch), 60, 96 and 120 end one. Runs ResumableTrial with `sets`
// on `slots` (" --slots 2" or "") to its end, and again killed after checkpoint 40 and resumed;
// requires that both end the same. Calls inspect(reference run) before.
void accumulate_kill_and_resume(const std::string& sets, const std::string& slots,
                                const std::function<void(const std::string&)>& inspect) {
  const std::string accumulate = "optimizations: {aggregation_frequency: 3}\n";
  TempDir tmp;
  const std::string reference = tmp / "reference";
  const std::string args = sets + slots + " --quiet --output ";
  auto r =
      run_command(kTrainer + " fit " + resumable_config(tmp, 0, accumulate) + args + reference);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(util::exists(reference + "/checkpoints/batch-0000000128/gradients.pt"));
  REQUIRE(util::exists(reference + "/checkpoints/batch-0000000120/metadata.json"));
  CHECK_FALSE(util::exists(reference + "/checkpoints/batch-0000000120/gradients.pt"));
  inspect(reference);
  const std::string run = tmp / "run";
  kill_after_report(kTrainer + " fit " + resumable_config(tmp, 20, accumulate) + args + run, run,
                    tmp / "log", 49, "batch-0000000040");
  CHECK(util::exists(run + "/checkpoints/batch-0000000040/gradients.pt"));
  resume_run(run);
  check_same_end(reference, run);
  // A model beyond ResumableTrial's own (the sparse embedding) ends the same too.
  const std::string last = "/checkpoints/batch-0000000128/model_1.pt";
  if (util::exists(reference + last)) {
    const bool same = read_file(run + last) == read_file(reference + last);
    CHECK(same);
  }
}

}  // namespace

TEST_CASE(
    "accumulated gradients are checkpointed: killed inside an accumulation window, a resume "
    "ends bitwise identical on 1 or 2 slots",
    "[checkpoint][resume]") {
  std::string slots;
  SECTION("1 slot") {}
  SECTION("2 slots") { slots = " --slots 2"; }
  accumulate_kill_and_resume("", slots, [](const std::string&) {});
}

TEST_CASE(
    "sparse gradients (an Embedding with sparse=true) are accumulated, averaged and "
    "checkpointed: killed inside a window, a resume ends bitwise identical on 1 or 2 slots",
    "[checkpoint][resume]") {
  std::string slots;
  int64_t ranks = 1;
  SECTION("1 slot") {}
  SECTION("2 slots") {
    slots = " --slots 2";
    ranks = 2;
  }
  accumulate_kill_and_resume(
      " --set hyperparameters.sparse=true", slots, [&](const std::string& reference) {
        // The embedding's weight is the 5th tensor with a gradient (after the MLP's four), and
        // each rank's accumulated gradient of it is kept, sparse: on 1 slot as backward made it;
        // on 2, the ranks' sparse average that the later windows accumulate into.
        torch::serialize::InputArchive gradients;
        gradients.load_from(reference + "/checkpoints/batch-0000000128/gradients.pt");
        for (int64_t rank = 0; rank < ranks; ++rank) {
          INFO("rank " << rank);
          torch::Tensor g;
          REQUIRE(gradients.try_read(fmt::format("rank_{}_param_4", rank), g));
          CHECK(g.is_sparse());
          CHECK(g.sizes() == torch::IntArrayRef{16, 1});
        }
        // The embedding is the checkpoint's second model, which accumulate_kill_and_resume
        // compares after the resume.
        REQUIRE(util::exists(reference + "/checkpoints/batch-0000000128/model_1.pt"));
      });
}

TEST_CASE("SIGTERM, SIGUSR1 and SIGHUP checkpoint at the batch boundary and exit 4",
          "[checkpoint][resume]") {
  reference();
  for (int sig : {SIGTERM, SIGUSR1, SIGHUP}) {
    INFO("signal " << sig);
    TempDir tmp;
    const std::string run = tmp / "run";
    Child child(kTrainer + " fit " + resumable_config(tmp, 5) + " --output " + run, tmp / "log");
    REQUIRE(wait_until([&] { return last_batches(run + "/metrics.jsonl", "training") >= 28; }));
    child.signal(sig);
    CHECK(child.wait() == 4);
    const std::string log = read_file(tmp / "log");
    CHECK_THAT(log, Catch::Contains("checkpointing at batch") && Catch::Contains("stopped: ") &&
                        Catch::Contains("; continue it with: trainer fit --resume " + run + "\n"));
    // No periodic checkpoint falls in 21..31: one there is the stop's. The signal may land
    // before batch 29 starts (under load), so the stop may be at 28 itself.
    const std::string stopped_at = latest(run);
    CHECK(stopped_at >= "batch-0000000028");
    CHECK(stopped_at < "batch-0000000128");
    resume_and_compare(run);
  }
}

TEST_CASE("under nohup, SIGHUP leaves the run going to its end", "[checkpoint][resume]") {
  reference();
  TempDir tmp;
  const std::string run = tmp / "run";
  Child child("nohup " + kTrainer + " fit " + resumable_config(tmp, 5) + " --output " + run,
              tmp / "log");
  REQUIRE(wait_until([&] { return last_batches(run + "/metrics.jsonl", "training") >= 28; }));
  child.signal(SIGHUP);
  INFO(read_file(tmp / "log"));
  CHECK(child.wait() == 0);
  check_same_end(reference().run, run);
}

TEST_CASE("a closed console stops a fit as SIGTERM does: checkpointed, exit 4, resumable",
          "[checkpoint][resume]") {
  reference();
  TempDir tmp;
  const std::string run = tmp / "run";
  // The reader of trainer's stdout ends after the report of batch 21 (60 ms a batch).
  const auto piped = run_until_line(
      kTrainer + " fit " + resumable_config(tmp, 60) + " --output " + run, "batch *21 ");
  INFO(piped.output);
  CHECK(piped.exit_code == 4);
  CHECK_THAT(piped.output,
             Catch::Contains("warning: the console was closed (standard output: Broken pipe): "
                             "checkpointing at batch"));
  // Stopped at the first batch that ended after sed did, not at the next line the trainer wrote
  // (the report at 28): the closed pipe is found without a failed write.
  CHECK(latest(run) >= "batch-0000000021");
  CHECK(latest(run) < "batch-0000000028");
  resume_and_compare(run);
}

TEST_CASE("a console on a full disk loses lines only: the run, on 1 or 2 slots, ends whole",
          "[checkpoint][resume]") {
  reference();
  for (const std::string slots : {"1", "2"}) {
    INFO("slots " << slots);
    TempDir tmp;
    const std::string run = tmp / "run";
    const auto fit = run_command(kTrainer + " fit " + resumable_config(tmp, 0) + " --slots " +
                                 slots + " --output " + run + " > /dev/full");
    INFO(fit.output);
    CHECK(fit.exit_code == 0);
    CHECK(latest(run) == "batch-0000000128");
    if (slots == "1") {
      CHECK_THAT(read_file(run + "/trainer.log"),
                 Catch::Contains("cannot write to standard output: No space left on device"));
      check_same_end(reference().run, run);
    }
  }
}

TEST_CASE("a second SIGINT stops at once: the previous checkpoint stays loadable",
          "[checkpoint][resume]") {
  reference();
  TempDir tmp;
  // A fit, or a search that passes each SIGINT on to its trial, writing checkpoints slowly. The
  // first SIGINT comes past batch 20 (a stop at batch 20 itself would find its checkpoint current
  // and write none); the second while a checkpoint is being written (the graceful stop's, or
  // batch 32's validation's, where a search passed the first on late). Returns the exit code and
  // the seconds from the second SIGINT to the exit.
  const auto interrupt_twice = [&](const std::string& args, const std::string& run) {
    Child child(kTrainer + " fit " + resumable_config(tmp, 5) +
                    " --set hyperparameters.save_delay_ms=5000 " + args,
                tmp / "log");
    REQUIRE(wait_until([&] { return latest(run) == "batch-0000000020"; }, 120));
    REQUIRE(wait_until([&] { return last_batches(run + "/metrics.jsonl", "training") >= 21; }));
    child.signal(SIGINT);
    REQUIRE(wait_until([&] {
      for (const auto& name : util::list_directory(run + "/checkpoints")) {
        if (name.rfind(".tmp-", 0) == 0) return true;
      }
      return false;
    }));
    const auto sent = std::chrono::steady_clock::now();
    child.signal(SIGINT);
    const int code = child.wait();
    const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - sent;
    INFO(read_file(tmp / "log"));
    CHECK(latest(run) == "batch-0000000020");
    return std::make_pair(code, waited.count());
  };
  SECTION("a fit") {
    const std::string run = tmp / "run";
    const auto [code, seconds] = interrupt_twice("--output " + run, run);
    CHECK(code == 130);
    CHECK(seconds < 3);  // the checkpoint being written takes 5 s
    CHECK_THAT(read_file(tmp / "log"), Catch::Contains("interrupted twice"));
    resume_and_compare(run);
  }
  SECTION("a search's trial") {
    const std::string exp = tmp / "exp";
    const auto [code, seconds] =
        interrupt_twice("--set searcher.name=grid --output " + exp, exp + "/trials/1");
    CHECK(code == crucible::kExitStopped);  // the search's own stop
    CHECK(seconds < 3);                     // the checkpoint being written takes 5 s
    const auto resumed = run_command(kTrainer + " fit --resume " + exp);
    INFO(resumed.output);
    CHECK(resumed.exit_code == 0);
    CHECK(latest(exp + "/trials/1") == "batch-0000000128");
  }
}

TEST_CASE("a requeued command continues its --output run, and a run without a checkpoint restarts",
          "[checkpoint][resume]") {
  reference();
  TempDir tmp;
  const std::string run = tmp / "run";
  const std::string command = kTrainer + " fit " + resumable_config(tmp, 5) + " --output " + run;
  {
    Child child(command, tmp / "log");
    REQUIRE(wait_until([&] { return last_batches(run + "/metrics.jsonl", "training") >= 28; }));
    child.signal(SIGTERM);
    CHECK(child.wait() == 4);
  }
  // A preempted and requeued job runs the same command again, its own files beside the run.
  write_file(run + "/slurm-42.out", "a job's log\n");
  auto rerun = run_command(command);
  INFO(rerun.output);
  REQUIRE(rerun.exit_code == 0);
  CHECK_THAT(rerun.output, Catch::Contains(run + " holds a run of this config: continuing it") &&
                               Catch::Contains("continuing from " + run + "/checkpoints/batch-"));
  check_same_end(reference().run, run);
  // Another config on the same --output stays an error, listing what differs.
  auto other = run_command(command + " --set hyperparameters.hidden=16");
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.output, Catch::Contains("--output " + run +
                                           ": it holds a run of another "
                                           "config") &&
                               Catch::Contains("hyperparameters.hidden: 32 -> 16"));

  // Killed before its first checkpoint (at batch 20, 1 s in): --resume starts it from batch 0.
  const std::string early = tmp / "early";
  {
    Child child(kTrainer + " fit " + resumable_config(tmp, 50) + " --quiet --output " + early,
                tmp / "early.log");
    REQUIRE(wait_until([&] { return last_batches(early + "/metrics.jsonl", "training") >= 7; }));
    child.signal(SIGKILL);
    CHECK(child.wait() == 128 + SIGKILL);
  }
  REQUIRE(crucible::checkpoint::list(early).empty());
  auto restarted = run_command(kTrainer + " fit --resume " + early);
  INFO(restarted.output);
  REQUIRE(restarted.exit_code == 0);
  CHECK_THAT(restarted.output,
             Catch::Contains(early + " has no checkpoint (it stopped before its first): training "
                                     "from the beginning"));
  check_same_end(reference().run, early);
}

TEST_CASE("one process at a time writes a run: a second is refused, a killed one frees it",
          "[checkpoint][resume]") {
  reference();
  TempDir tmp;
  const std::string run = tmp / "run";
  const std::string command = kTrainer + " fit " + resumable_config(tmp, 50) + " --output " + run;
  {
    Child child(command, tmp / "log");
    REQUIRE(wait_until([&] { return last_batches(run + "/metrics.jsonl", "training") >= 2; }));
    for (const std::string& second : {command, kTrainer + " fit --resume " + run}) {
      auto refused = run_command(second);
      INFO(refused.output);
      CHECK(refused.exit_code == 2);
      CHECK_THAT(refused.output, Catch::Contains(run + ": another process is writing it"));
    }
    child.signal(SIGKILL);
    CHECK(child.wait() == 128 + SIGKILL);
  }
  // The lock died with its holder: the requeued command continues the run to the same end.
  auto rerun = run_command(command);
  INFO(rerun.output);
  REQUIRE(rerun.exit_code == 0);
  check_same_end(reference().run, run);
}

TEST_CASE("a stop requested at the batch a signal stops is kept: the resumed run stops there too",
          "[checkpoint][resume]") {
  TempDir tmp;
  const std::string config = tmp / "stop.yaml";
  write_file(config, recording_yaml("stop", "stop_at: 5",
                                    "searcher: {metric: validation_avg_x}\n"
                                    "max_length: {batches: 20}\n"
                                    "min_validation_period: {batches: 3}\n"));
  const auto fit = [&](const std::string& run, const std::string& args) {
    return run_command(kTrainer + " fit " + config + " --quiet --output " + run + args);
  };
  const auto reference = fit(tmp / "reference", "");
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);
  // SIGTERM in the batch whose end agrees the trial's stop: the signal wins that vote, and the
  // checkpoint it takes holds the request, which the resumed run acts on before training more.
  const auto signalled = fit(tmp / "signalled", " --set hyperparameters.sigterm_at=5");
  INFO(signalled.output);
  CHECK(signalled.exit_code == crucible::kExitStopped);
  const auto resumed = run_command(kTrainer + " fit --resume " + (tmp / "signalled") + " --quiet");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK(read_file(tmp / "signalled/metrics.jsonl") == read_file(tmp / "reference/metrics.jsonl"));
}

TEST_CASE(
    "a validation that fails as training ends leaves the checkpoint the loop owed: the resumed "
    "run validates there and ends as an uninterrupted one",
    "[checkpoint][resume]") {
  TempDir tmp;
  const std::string config = tmp / "end.yaml";
  write_file(config,
             "name: end\nentrypoint: crucible_test_trials:SearchTrial\n"
             "hyperparameters: {global_batch_size: 16, records: 256, lr: 0.05}\n"
             "searcher: {metric: validation_loss}\n"
             "max_length: {batches: 20}\n"
             "min_validation_period: {batches: 8}\n"
             "min_checkpoint_period: {batches: 10}\n"
             "reproducibility: {experiment_seed: 5}\n");
  const auto fit = [&](const std::string& run, const std::string& args) {
    return run_command(kTrainer + " fit " + config + " --quiet --output " + run + args);
  };
  const auto reference = fit(tmp / "reference", "");
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);
  // The validation after batch 20 (not on the period of 8) throws; batch 20's checkpoint was due.
  const std::string run = tmp / "failed";
  const auto failed = fit(run,
                          " --set hyperparameters.fail_validation_at=20 --set "
                          "hyperparameters.fail_once=" +
                              (tmp / "once"));
  INFO(failed.output);
  CHECK(failed.exit_code == crucible::kExitTrainingFailed);
  CHECK_THAT(failed.output, Catch::Contains("injected failure in the validation after batch 20"));
  const std::string last = run + "/checkpoints/batch-0000000020";
  REQUIRE(crucible::util::exists(last + "/metadata.json"));
  CHECK(crucible::checkpoint::metadata(last).validation.empty());
  const auto resumed = run_command(kTrainer + " fit --resume " + run + " --quiet");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK(read_file(run + "/metrics.jsonl") == read_file(tmp / "reference/metrics.jsonl"));
  CHECK(crucible::checkpoint::metadata(last).validation ==
        crucible::checkpoint::metadata(tmp / "reference/checkpoints/batch-0000000020").validation);
}
