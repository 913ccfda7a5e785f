// Searches through the real `trainer fit`: the experiment directory, the trials' runs, retries,
// invalid hyperparameters, concurrency, and an experiment killed and resumed.
#include <atomic>
#include <csignal>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include <crucible/errors.h>
#include <fmt/format.h>

#include "catch.h"
#include "checkpoint/checkpoint.h"
#include "process.h"
#include "search/scheduler.h"
#include "search_runs.h"
#include "slurm_cluster.h"

using namespace crucible::testing;
using crucible::search::Scheduler;
using nlohmann::json;

TEST_CASE("trainer fit runs a 2x2 grid as 4 trials in an experiment directory",
          "[search][experiment]") {
  TempDir tmp;
  const std::string exp = tmp / "exp";
  const std::string output = search_ok(tmp, "{name: grid, metric: validation_loss}",
                                       "lr: {type: double, minval: 0.02, maxval: 0.1, count: 2}, "
                                       "hidden: {type: categorical, vals: [4, 8]}");
  const auto rows = rows_of(exp);
  CHECK(rows_with(rows, "created").size() == 4);
  CHECK(rows_with(rows, "completed").size() == 4);
  const auto validated = rows_with(rows, "validated");
  REQUIRE(validated.size() == 4);
  std::map<double, int64_t> by_metric;
  for (const auto& row : validated) {
    const int64_t id = row["trial"];
    CHECK(row["length"] == 16);
    // Each trial is a normal run: its own config with constant hyperparameters, and its
    // validation in its metrics.jsonl.
    const std::string run = exp + "/trials/" + std::to_string(id);
    const auto metrics = read_metrics(run + "/metrics.jsonl");
    REQUIRE(!metrics.empty());
    CHECK(metrics.back()["type"] == "validation");
    CHECK(metrics.back()["metrics"]["validation_loss"] == row["metric"]);
    CHECK_THAT(read_file(run + "/config.yaml"), Catch::Contains("name: single"));
    by_metric[row["metric"].get<double>()] = id;
  }
  CHECK(by_metric.size() == 4);
  // best names the best trial's best checkpoint, which validate accepts.
  const int64_t best = by_metric.begin()->second;
  const std::string pointer = trimmed(read_file(exp + "/best"));
  CHECK(pointer == "trials/" + std::to_string(best) + "/checkpoints/batch-0000000016");
  const auto v = run_command(kTrainer + " validate --checkpoint " + exp + "/" + pointer);
  INFO(v.output);
  CHECK(v.exit_code == 0);
  CHECK_THAT(v.output, Catch::Contains("validation_loss"));
  // So do the experiment, its best file and the trial's run, each naming the checkpoint.
  for (const std::string& given : {exp, exp + "/best", exp + "/trials/" + std::to_string(best)}) {
    const auto named = run_command(kTrainer + " validate --checkpoint " + given);
    INFO(named.output);
    CHECK(named.exit_code == 0);
    CHECK_THAT(named.output,
               Catch::Contains("--checkpoint " + given + ": checkpoint " + exp + "/" + pointer) &&
                   Catch::Contains(v.output));
  }
  // The table lists the trials best first.
  const auto table = output.find("TRIAL  STATE");
  REQUIRE(table != std::string::npos);
  const auto first_row = output.find('\n', table) + 1;
  CHECK(output.substr(first_row, 5) == fmt::format("{:>5}", best));
  CHECK(util::exists(exp + "/config.yaml"));
  CHECK(util::exists(exp + "/experiment.log"));
}

TEST_CASE(
    "a trial ranks by its best validation, not its last, and best names that validation's "
    "checkpoint",
    "[search][experiment]") {
  TempDir tmp;
  // The loss falls as the trials train, so with larger-is-better the best validation of each is
  // an early one, not its last.
  const std::string output = search_ok(
      tmp, "{name: grid, metric: validation_loss, smaller_is_better: false}",
      "lr: {type: categorical, vals: [0.02, 0.05]}", "min_validation_period: {batches: 4}\n");
  const std::string exp = tmp / "exp";
  const auto rows = rows_of(exp);
  std::map<int64_t, double> best_of;
  bool last_differs = false;
  for (const auto& done : rows_with(rows, "completed")) {
    const int64_t id = done["trial"];
    double best = -1, last = -1;
    for (const auto& row : read_metrics(exp + "/trials/" + std::to_string(id) + "/metrics.jsonl")) {
      if (row["type"] != "validation") continue;
      last = row["metrics"]["validation_loss"];
      best = std::max(best, last);
    }
    CHECK(done["best_metric"] == best);
    last_differs = last_differs || last != best;
    best_of[id] = best;
  }
  REQUIRE(best_of.size() == 2);
  CHECK(last_differs);  // the case this test is about happened
  const auto winner = std::max_element(best_of.begin(), best_of.end(),
                                       [](auto& a, auto& b) { return a.second < b.second; });
  const json meta =
      json::parse(read_file(exp + "/" + trimmed(read_file(exp + "/best")) + "/metadata.json"));
  CHECK(meta["validation"]["validation_loss"] == winner->second);
  CHECK_THAT(output,
             Catch::Contains(fmt::format("best: trial {} (validation_loss ", winner->first)) &&
                 !Catch::Contains("was not kept"));
}

TEST_CASE(
    "a search warm starts every trial from source_trial_id, and its end keeps the experiment's "
    "save_experiment_best best checkpoints beside each trial's own",
    "[search][experiment]") {
  TempDir tmp;
  // A run to start from: the same trial on one lr.
  auto source = fit(search_config(tmp, "{name: single, metric: validation_loss}", "lr: 0.05"),
                    tmp / "source");
  INFO(source.output);
  REQUIRE(source.exit_code == 0);
  const std::string exp = tmp / "exp";
  const std::string config = search_config(
      tmp, "{name: grid, metric: validation_loss, source_trial_id: " + (tmp / "source") + "}",
      "lr: {type: double, minval: 0.02, maxval: 0.1, count: 2}",
      "min_validation_period: {batches: 4}\ncheckpoint_policy: all\n"
      "checkpoint_storage: {save_trial_best: 1, save_trial_latest: 1, save_experiment_best: 3}\n");
  const auto first = fit(config, exp);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  // Every trial's checkpoints, validated at 4, 8, 12 and 16 batches, by their metric.
  std::map<std::string, double> metric;
  std::vector<std::string> runs;
  for (const char* id : {"1", "2"}) {
    const std::string run = exp + "/trials/" + id;
    runs.push_back(run);
    CHECK_THAT(read_file(run + "/trainer.log"),
               Catch::Contains("model weights from " + tmp / "source/checkpoints/batch-"));
    for (const auto& row : read_metrics(run + "/metrics.jsonl")) {
      if (row["type"] != "validation") continue;
      metric[run + fmt::format("/checkpoints/batch-{:010d}", row["batches"].get<int64_t>())] =
          row["metrics"]["validation_loss"].get<double>();
    }
  }
  REQUIRE(metric.size() == 8);
  // What must remain: each trial's newest and best, and the 3 best over both trials.
  std::set<std::string> trial_kept, expected;
  for (const std::string& run : runs) {
    std::string best;
    for (const auto& [dir, value] : metric) {
      if (dir.rfind(run + "/", 0) == 0 && (best.empty() || value < metric[best])) best = dir;
    }
    trial_kept.insert(best);
    trial_kept.insert(run + "/checkpoints/batch-0000000016");
  }
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto& [dir, value] : metric) ranked.emplace_back(value, dir);
  std::sort(ranked.begin(), ranked.end());
  expected = trial_kept;
  for (size_t i = 0; i < 3; ++i) expected.insert(ranked[i].second);
  CHECK(expected.size() > trial_kept.size());  // the experiment's best keep one more
  std::set<std::string> kept;
  for (const std::string& run : runs) {
    for (const std::string& dir : crucible::checkpoint::list(run)) kept.insert(dir);
  }
  CHECK(kept == expected);

  // The same search again, with a reader holding a checkpoint that the end deleted above: the end
  // keeps it for the reader, which deletes it as it lets it go.
  std::smatch removed;
  const std::string log = read_file(exp + "/experiment.log");
  REQUIRE(std::regex_search(log, removed, std::regex("removed (trials/[^:]+): kept by neither")));
  const std::string again = tmp / "again";
  const std::string doomed = again + "/" + removed[1].str();
  std::unique_ptr<crucible::checkpoint::Pin> reader;
  std::atomic<bool> searched{false};
  std::thread pinner([&] {
    while (!reader && !searched) {
      reader = crucible::checkpoint::pin(doomed);  // null until the trial writes it
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const auto second = fit(config, again);
  searched = true;
  pinner.join();
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  REQUIRE(reader);
  CHECK(util::exists(doomed + "/metadata.json"));
  CHECK_THAT(read_file(again + "/experiment.log"),
             Catch::Contains("kept " + removed[1].str() +
                             " for now (kept by neither its trial's retention nor the "
                             "experiment's 3 best): another process is reading it"));
  reader.reset();
  CHECK_FALSE(util::exists(doomed));
  CHECK_FALSE(util::exists(doomed + ".to-delete"));
}

TEST_CASE("random search: a rerun draws the same hyperparameters and gets the same metrics",
          "[search][experiment]") {
  TempDir tmp;
  const std::string config =
      search_config(tmp, "{name: random, metric: validation_loss, max_trials: 3}",
                    "lr: {type: log, minval: -2, maxval: -1}, hidden: {type: int, minval: 2, "
                    "maxval: 12}");
  const auto a = fit(config, tmp / "a");
  const auto b = fit(config, tmp / "b");
  INFO(a.output << b.output);
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  const auto rows = rows_of(tmp / "a");
  CHECK(rows_with(rows, "created").size() == 3);
  CHECK(rows == rows_of(tmp / "b"));
  const auto created = rows_with(rows, "created");
  CHECK(created[0]["hparams"] != created[1]["hparams"]);
}

TEST_CASE(
    "random search without an experiment_seed draws one and records it: a rerun draws other "
    "trials, and the recorded seed draws the same",
    "[search][experiment]") {
  TempDir tmp;
  const std::string config =
      search_config(tmp, "{name: random, metric: validation_loss, max_trials: 2}",
                    "lr: {type: log, minval: -2, maxval: -1}, hidden: {type: int, minval: 2, "
                    "maxval: 1000}");
  const auto unseeded = [&](const std::string& out) {
    return run_command(kTrainer + " fit " + config +
                       " --set reproducibility.experiment_seed=null --output " + out);
  };
  const auto a = unseeded(tmp / "a");
  const auto b = unseeded(tmp / "b");
  INFO(a.output << b.output);
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  const auto recorded = [&](const std::string& dir) {
    return crucible::load_experiment_config(dir + "/config.yaml").reproducibility.experiment_seed;
  };
  const auto seed = recorded(tmp / "a");
  REQUIRE(seed.has_value());
  CHECK(seed != recorded(tmp / "b"));
  CHECK_THAT(a.output, Catch::Contains(fmt::format(
                           "seed {} drawn (no reproducibility.experiment_seed given)", *seed)));
  const auto rows = rows_of(tmp / "a");
  CHECK(rows_with(rows, "created") != rows_with(rows_of(tmp / "b"), "created"));
  // The same command on its --output (a requeued job) finds its experiment, seed and all: it
  // records its resume and decides nothing new.
  const auto again = unseeded(tmp / "a");
  INFO(again.output);
  CHECK(again.exit_code == 0);
  const auto resumed = rows_of(tmp / "a");
  CHECK(decisions(resumed) == rows);
  CHECK(resumed.back() == json{{"event", "resumed"}});
  // The recorded seed, given, draws the same trials and gets the same metrics.
  const auto c = run_command(kTrainer + " fit " + config +
                             fmt::format(" --set reproducibility.experiment_seed={}", *seed) +
                             " --output " + tmp / "c");
  INFO(c.output);
  REQUIRE(c.exit_code == 0);
  CHECK(rows_of(tmp / "c") == rows);
}

TEST_CASE("adaptive ASHA with max_trials 8 trains each trial to the rung where its rules stop it",
          "[search][experiment]") {
  TempDir tmp;
  const std::string exp = tmp / "exp";
  // 8 trials, max_time 16, divisor 2, aggressive: one bracket of 4 rungs, [2, 4, 8, 16] batches.
  search_ok(tmp,
            "{name: adaptive_asha, metric: validation_loss, max_trials: 8, max_time: 16, "
            "time_metric: batches, divisor: 2, mode: aggressive, max_concurrent_trials: 2}",
            "lr: {type: log, minval: -3, maxval: 0}");
  const auto rows = rows_of(exp);
  CHECK(rows_with(rows, "created").size() == 8);
  CHECK_FALSE(rows_with(rows, "stopped").empty());
  CHECK_FALSE(rows_with(rows, "completed").empty());
  CHECK(rows_with(rows, "stopped").size() + rows_with(rows, "completed").size() == 8);
  // The runner made exactly the decisions the searcher's rules make from these metrics.
  crucible::ExperimentConfig config = crucible::load_experiment_config(exp + "/config.yaml");
  Scheduler rules(config);
  std::vector<json> expected = rules.start();
  for (const auto& row : rows) {
    if (const auto result = Scheduler::result_of_row(row, "experiment.jsonl")) {
      const auto more = rules.report(*result);
      expected.insert(expected.end(), more.begin(), more.end());
    }
  }
  CHECK(expected == rows);
  // Each trial trained exactly to the rung it ended at, and no further.
  for (const auto& row : rows) {
    if (row["event"] != "stopped" && row["event"] != "completed") continue;
    const std::string run = exp + "/trials/" + row["trial"].dump();
    const auto metrics = read_metrics(run + "/metrics.jsonl");
    CHECK(metrics.back()["batches"] == row["length"]);
    const int64_t length = row["length"];
    CHECK((length == 2 || length == 4 || length == 8 || length == 16));
    CHECK((row["event"] == "completed") == (length == 16));
  }
}

TEST_CASE("a failing trial is restarted from its checkpoint, then recorded as failed",
          "[search][experiment]") {
  TempDir tmp;
  const std::string exp = tmp / "exp";
  const std::string once = tmp / "failed-once";
  // (fail_at, fail_once): never fails; fails every time at batch 6; fails once at batch 6.
  // The search goes on and ends.
  const std::string output = search_ok(
      tmp, "{name: grid, metric: validation_loss}",
      "lr: 0.05, fail_at: {type: categorical, vals: [-1, 6]}, fail_once: {type: categorical, "
      "vals: ['', '" +
          once + "']}",
      "max_restarts: 2\nmin_checkpoint_period: {batches: 4}\n");
  const auto rows = rows_of(exp);
  std::map<int64_t, json> hparams;
  for (const auto& row : rows_with(rows, "created")) hparams[row["trial"]] = row["hparams"];
  const auto failed = rows_with(rows, "failed");
  REQUIRE(failed.size() == 1);
  CHECK(hparams[failed[0]["trial"]]["fail_at"] == 6);
  CHECK(hparams[failed[0]["trial"]]["fail_once"] == "");
  CHECK_THAT(failed[0]["error"].get<std::string>(), Catch::Contains("injected failure at batch 6"));
  // Its length is how far its run reported before failing at batch 6, not 0.
  const int64_t reached = failed[0]["length"];
  CHECK(reached >= 4);
  CHECK(reached < 6);
  std::map<int64_t, int> restarts;
  for (const auto& row : rows_with(rows, "restarted")) ++restarts[row["trial"]];
  CHECK(restarts[failed[0]["trial"]] == 2);
  CHECK(rows_with(rows, "completed").size() == 3);
  for (const auto& [id, h] : hparams) {
    if (h["fail_at"] != 6 || h["fail_once"] == "") continue;
    CHECK(restarts[id] == 1);
    // The restart resumed the run from its checkpoint at batch 4.
    CHECK_THAT(read_file(exp + "/trials/" + std::to_string(id) + "/trainer.log"),
               Catch::Contains("batch-0000000004 at batch 4"));
  }
  CHECK_THAT(output, Catch::Contains("failed"));
}

TEST_CASE("a trial that rejects its hyperparameters is replaced, not retried",
          "[search][experiment]") {
  TempDir tmp;
  const std::string exp = tmp / "exp";
  search_ok(tmp, "{name: random, metric: validation_loss, max_trials: 3}",
            "lr: {type: double, minval: 0.01, maxval: 0.16}, invalid_above: 0.1");
  const auto rows = rows_of(exp);
  std::map<int64_t, double> lr;
  for (const auto& row : rows_with(rows, "created")) lr[row["trial"]] = row["hparams"]["lr"];
  const auto invalid = rows_with(rows, "invalid");
  REQUIRE_FALSE(invalid.empty());
  for (const auto& row : invalid) {
    CHECK(lr[row["trial"]] > 0.1);
    CHECK_THAT(row["error"].get<std::string>(), Catch::Contains("is above invalid_above"));
  }
  CHECK(rows_with(rows, "restarted").empty());
  const auto completed = rows_with(rows, "completed");
  CHECK(completed.size() == 3);
  for (const auto& row : completed) CHECK(lr[row["trial"]] <= 0.1);
}

TEST_CASE("two concurrent trials finish sooner than the same two one after the other",
          "[search][experiment]") {
  TempDir tmp;
  // Each trial sleeps 100 ms a batch for 16 batches: sleeping, not computing, dominates. The
  // trials run on CPU slots (one per core); on a GPU machine each trial would have a GPU of its
  // own, and a machine of one GPU runs them one after the other (tools/gpu checks that).
  const std::string hp = "lr: {type: double, minval: 0.01, maxval: 0.1}, sleep_ms: 100";
  auto timed = [&](int64_t concurrent, const std::string& out) {
    const auto start = std::chrono::steady_clock::now();
    const auto r = fit(search_config(tmp,
                                     "{name: random, metric: validation_loss, max_trials: 2, "
                                     "max_concurrent_trials: " +
                                         std::to_string(concurrent) + "}",
                                     hp),
                       out, "CUDA_VISIBLE_DEVICES= ");
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  const double serial = timed(1, tmp / "serial");
  const double concurrent = timed(2, tmp / "concurrent");
  INFO("serial " << serial << " s, concurrent " << concurrent << " s");
  CHECK(concurrent < 0.8 * serial);
  // Same seed, same trials: the decisions do not depend on how many ran at once.
  CHECK(rows_with(rows_of(tmp / "serial"), "validated") ==
        rows_with(rows_of(tmp / "concurrent"), "validated"));
}

TEST_CASE("a search counts the cores its CPU affinity allows, not the machine's",
          "[search][experiment]") {
  TempDir tmp;
  const std::string config =
      search_config(tmp, "{name: grid, metric: validation_loss}",
                    "lr: {type: double, minval: 0.02, maxval: 0.1, count: 2}");
  // On CPU slots: a GPU machine gives each trial a GPU instead of cores.
  const auto r = run_command("CUDA_VISIBLE_DEVICES= taskset -c 0 " + kTrainer + " fit " + config +
                             " --output " + (tmp / "exp"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("up to 1 trial at once (2 allowed, and the 1 core(s) this "
                                       "process may use hold 1 trial(s) of 1 slot(s))"));
  CHECK(rows_with(rows_of(tmp / "exp"), "completed").size() == 2);
}

TEST_CASE(
    "a resumed search takes a log that lacks a row before others, and refuses one that "
    "records what the searcher did not decide",
    "[search][experiment]") {
  TempDir tmp;
  search_ok(tmp, "{name: grid, metric: validation_loss, max_concurrent_trials: 1}",
            "lr: 0.05, hidden: {type: categorical, vals: [4, 8]}");
  const std::string log = tmp / "exp/experiment.jsonl";
  const auto rows = read_metrics(log);
  REQUIRE(rows.size() == 6);
  REQUIRE(rows[3]["event"] == "created");
  // Without trial 2's 'created' row, as an earlier version could leave it after a failed write.
  std::string gapped;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (i != 3) gapped += rows[i].dump() + "\n";
  }
  write_file(log, gapped);
  const auto resumed = run_command(kTrainer + " fit --resume " + tmp / "exp");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  // It records its resume and nothing else.
  const std::string after = read_file(log);
  CHECK(after.substr(0, gapped.size()) == gapped);
  CHECK(json::parse(after.substr(gapped.size()))["event"] == "resumed");
  write_file(log, gapped);
  // A row of a trial the searcher never created.
  json stranger = rows[2];
  stranger["trial"] = 7;
  write_file(log, gapped + stranger.dump() + "\n");
  const auto refused = run_command(kTrainer + " fit --resume " + tmp / "exp");
  INFO(refused.output);
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.output,
             Catch::Contains("experiment.jsonl, row 6, does not match this search"));
}

TEST_CASE(
    "an experiment SIGKILLed, SIGTERMed or cut off from its console in its second rung resumes to "
    "the same decisions",
    "[search][experiment]") {
  TempDir tmp;
  const std::string searcher =
      "{name: adaptive_asha, metric: validation_loss, max_trials: 6, max_time: 16, time_metric: "
      "batches, divisor: 2, mode: aggressive, max_concurrent_trials: 2}";
  const std::string hp = "lr: {type: log, minval: -3, maxval: 0}, sleep_ms: 40";
  const std::string config =
      search_config(tmp, searcher, hp, "min_checkpoint_period: {batches: 1}\n");
  const auto reference = fit(config, tmp / "reference");
  INFO(reference.output);
  REQUIRE(reference.exit_code == 0);

  for (const int sig : {SIGKILL, SIGTERM, SIGPIPE}) {
    INFO("signal " << sig);
    const std::string exp = tmp / ("signalled" + std::to_string(sig));
    if (sig == SIGPIPE) {
      // Not sent: the reader of the search's stdout ends at the first trial kept at rung 0; the
      // search finds its console closed.
      const auto piped =
          run_until_line(kTrainer + " fit " + config + " --output " + exp, ": continue$");
      INFO(piped.output);
      CHECK(piped.exit_code == crucible::kExitStopped);
      CHECK_THAT(piped.output,
                 Catch::Contains("warning: the console was closed (standard output: Broken "
                                 "pipe): stopped every trial as on SIGTERM, with a checkpoint; "
                                 "continue with `trainer fit --resume " +
                                 exp + "`"));
    } else {
      Child child(kTrainer + " fit " + config + " --output " + exp, exp + ".out");
      // The second rung: a trial was kept at rung 0 and trains on towards rung 1.
      REQUIRE(wait_until(
          [&] {
            for (const auto& row : read_metrics(exp + "/experiment.jsonl")) {
              if (row["event"] == "validated" && row["decision"] == "continue") return true;
            }
            return false;
          },
          120));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (sig == SIGTERM) {
        // Asked what it is doing (SIGUSR2), the search asks its running trials, which answer in
        // their logs and go on (the decisions below stay the reference's). Asked again until one
        // answers: a trial process still starting, before its fit, ignores the question.
        auto asked = std::chrono::steady_clock::time_point();
        CHECK(wait_until(
            [&] {
              if (std::chrono::steady_clock::now() - asked > std::chrono::milliseconds(200)) {
                child.signal(SIGUSR2);
                asked = std::chrono::steady_clock::now();
              }
              for (const auto& name : util::list_directory(exp + "/trials")) {
                if (name.size() > 4 && name.compare(name.size() - 4, 4, ".log") == 0 &&
                    read_file(exp + "/trials/" + name)
                            .find("asked what it is doing (by process ") != std::string::npos) {
                  return true;
                }
              }
              return false;
            },
            20));
      }
      child.signal(sig);
      const int code = child.wait();
      if (sig == SIGTERM) {
        // The running trials checkpoint and stop, and so does the search, saying how to go on.
        INFO(read_file(exp + ".out"));
        CHECK(code == crucible::kExitStopped);
        CHECK_THAT(read_file(exp + ".out"), Catch::Contains("--resume " + exp));
      }
    }
    CHECK(rows_with(rows_of(exp), "completed").empty());
    // After a stop, as a requeued job does: the same command, whose --output holds the
    // experiment.
    const auto resumed =
        run_command(sig == SIGKILL ? kTrainer + " fit --resume " + exp
                                   : kTrainer + " fit " + config + " --output " + exp);
    INFO(resumed.output);
    REQUIRE(resumed.exit_code == 0);
    if (sig != SIGKILL) {
      CHECK_THAT(resumed.output, Catch::Contains("resuming experiment " + exp +
                                                 " (it holds this experiment's config)"));
    }
    CHECK(decisions(rows_of(exp)) == decisions(rows_of(tmp / "reference")));
    CHECK(read_file(exp + "/best") == read_file(tmp / "reference/best"));
  }
}

TEST_CASE("a second search on a running experiment's directory is refused",
          "[search][experiment]") {
  TempDir tmp;
  const std::string config =
      search_config(tmp, "{name: grid, metric: validation_loss}", "lr: 0.05, sleep_ms: 1000");
  const std::string exp = tmp / "exp";
  // 16 batches of a second each: still running when the second commands are done.
  Child child(kTrainer + " fit " + config + " --output " + exp, tmp / "exp.out");
  REQUIRE(wait_until([&] { return !rows_with(rows_of(exp), "created").empty(); }));
  for (const std::string& second :
       {kTrainer + " fit " + config + " --output " + exp, kTrainer + " fit --resume " + exp}) {
    const auto refused = run_command(second);
    INFO(refused.output);
    CHECK(refused.exit_code == 2);
    CHECK_THAT(refused.output, Catch::Contains(exp + ": another process is writing it"));
  }
  child.signal(SIGKILL);
  CHECK(child.wait() == 128 + SIGKILL);
}

TEST_CASE(
    "a resumed search takes changes to keys safe on a search's resume, with --allow-safe-changes, "
    "into its config.yaml and its resumed trials, and refuses the others",
    "[search][experiment]") {
  TempDir tmp;
  // One trial of 16 batches, a checkpoint after each: stopped after its first.
  const std::string config =
      search_config(tmp, "{name: grid, metric: validation_loss}", "lr: 0.05, sleep_ms: 200",
                    "min_checkpoint_period: {batches: 1}\n");
  const std::string exp = tmp / "exp";
  {
    Child child(kTrainer + " fit " + config + " --output " + exp, tmp / "exp.out");
    REQUIRE(wait_until([&] { return util::exists(exp + "/trials/1/latest"); }));
    child.signal(SIGTERM);
    const int code = child.wait();
    INFO(read_file(tmp / "exp.out"));
    REQUIRE(code == crucible::kExitStopped);
  }
  const std::string log = exp + "/experiment.jsonl";
  const std::string rows_before = read_file(log), recorded = read_file(exp + "/config.yaml");
  const auto resume = [&](const std::string& args) {
    return run_command(kTrainer + " fit --resume " + exp + args);
  };
  const std::string latest = " --set checkpoint_storage.save_trial_latest=4";
  // Safe, but not taken without --allow-safe-changes.
  const auto unaccepted = resume(latest);
  CHECK(unaccepted.exit_code == 2);
  CHECK_THAT(unaccepted.output,
             Catch::Contains("the config differs from the experiment's " + exp +
                             "/config.yaml:\n  checkpoint_storage.save_trial_latest: 1 -> "
                             "4\nThese changes are safe; pass --allow-safe-changes"));
  // The trials' length is the searcher's: safe on a run's resume, not on a search's.
  const auto longer = resume(latest + " --set max_length.batches=32 --allow-safe-changes");
  CHECK(longer.exit_code == 2);
  CHECK_THAT(longer.output, Catch::Contains("\n  max_length.batches: 16 -> 32  (unsafe)") &&
                                Catch::Contains("Start a new experiment for the others."));
  // Nor is a change taken by a resume that its log then refuses (a row of a trial never made).
  write_file(log, rows_before + R"({"event":"completed","trial":9})" + "\n");
  const auto unmatched = resume(latest + " --allow-safe-changes");
  CHECK(unmatched.exit_code == 1);
  CHECK_THAT(unmatched.output, Catch::Contains("does not match this search"));
  write_file(log, rows_before);
  // No refusal wrote a thing.
  CHECK(read_file(log) == rows_before);
  CHECK(read_file(exp + "/config.yaml") == recorded);
  // An unsafe change made by hand in config.yaml is found against the config trial 1 started with.
  const std::string bucket = "gradient_bucket_mb: 25";
  REQUIRE(recorded.find(bucket) != std::string::npos);
  std::string edited = recorded;
  edited.replace(edited.find(bucket), bucket.size(), "gradient_bucket_mb: 5");
  write_file(exp + "/config.yaml", edited);
  const auto by_hand = resume(" --allow-safe-changes");
  CHECK(by_hand.exit_code == 2);
  CHECK_THAT(by_hand.output,
             Catch::Contains("differs from the config trial 1 started with (" + exp +
                             "/trials/1.yaml) in keys that no resume may change:\n  "
                             "optimizations.gradient_bucket_mb: 25 -> 5  (unsafe)\nWas "
                             "config.yaml edited?"));
  write_file(exp + "/config.yaml", recorded);
  CHECK(read_file(log) == rows_before);

  const auto accepted = resume(latest + " --allow-safe-changes");
  INFO(accepted.output);
  REQUIRE(accepted.exit_code == 0);
  const std::string change = "checkpoint_storage.save_trial_latest: 1 -> 4";
  CHECK_THAT(accepted.output, Catch::Contains("accepted config changes:\n  " + change));
  const auto save_trial_latest = [](const std::string& file) {
    return crucible::load_experiment_config(file).checkpoint_storage.save_trial_latest;
  };
  CHECK(save_trial_latest(exp + "/config.yaml") == 4);
  // The resumed trial took it into its run, whose retention kept its 4 newest checkpoints.
  CHECK(save_trial_latest(exp + "/trials/1/config.yaml") == 4);
  CHECK_THAT(read_file(exp + "/trials/1/trainer.log"),
             Catch::Contains("accepted config changes:\n  " + change));
  CHECK(crucible::checkpoint::list(exp + "/trials/1").size() == 4);
  CHECK(rows_with(rows_of(exp), "resumed") ==
        std::vector<json>{{{"event", "resumed"}, {"changes", {change}}}});
  CHECK(rows_with(rows_of(exp), "completed").size() == 1);
  // Once accepted, it stays: a plain --resume finds no change.
  const auto plain = resume("");
  INFO(plain.output);
  CHECK(plain.exit_code == 0);
  CHECK(rows_of(exp).back() == json{{"event", "resumed"}});
}

TEST_CASE("inside a Slurm allocation the trials run as job steps", "[search][experiment][slurm]") {
  TempDir tmp;
  const SlurmCluster cluster(tmp / "slurm");
  const std::string config =
      search_config(tmp, "{name: random, metric: validation_loss, max_trials: 3}",
                    "lr: {type: double, minval: 0.01, maxval: 0.1}");
  const auto r = run_command(fmt::format("{} salloc -n 2 {} fit {} --output {}", cluster.env(),
                                         kTrainer, config, tmp / "exp"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Contains("up to 2 trials at once as job steps of Slurm job"));
  CHECK(rows_with(rows_of(tmp / "exp"), "completed").size() == 3);
  // slurmd launched one step per trial.
  const std::string slurmd = cluster.slurmd_log();
  for (const char* step : {".0 request", ".1 request", ".2 request"})
    CHECK_THAT(slurmd, Catch::Contains(step));
  CHECK_THAT(slurmd, !Catch::Contains(".3 request"));
}

TEST_CASE("trainer check refuses the search trainer fit refuses, with the same message",
          "[search][experiment]") {
  TempDir tmp;
  const std::string config = search_config(tmp, "{name: grid, metric: validation_loss}",
                                           "lr: {type: double, minval: 0.01, maxval: 0.1}");
  const auto check = run_command(kTrainer + " check " + config);
  const auto fit_run = fit(config, tmp / "exp");
  INFO(check.output << fit_run.output);
  CHECK(check.exit_code == 2);
  CHECK(fit_run.exit_code == 2);
  CHECK_THAT(check.output, Catch::Contains("hyperparameters.lr") && Catch::Contains("count"));
  CHECK(check.output == fit_run.output);
  CHECK_FALSE(util::exists(tmp / "exp"));
}

TEST_CASE("trainer check prints what a search runs, and refuses a grid past a million points",
          "[search][experiment]") {
  TempDir tmp;
  const std::string grid =
      search_config(tmp, "{name: grid, metric: validation_loss, max_concurrent_trials: 2}",
                    "lr: {type: double, minval: 0.01, maxval: 0.1, count: 3}, hidden: "
                    "{type: categorical, vals: [4, 8]}");
  // On one core, GPUs hidden, outside Slurm: the machine runs fewer at once than allowed.
  const auto g = run_command("env -u SLURM_JOB_ID CUDA_VISIBLE_DEVICES= taskset -c 0 " + kTrainer +
                             " check " + grid);
  INFO(g.output);
  CHECK(g.exit_code == 0);
  CHECK_THAT(g.output, Catch::Contains("# search grid: 6 trials (hidden: 2 × lr: 3) of 16 batches, "
                                       "up to 2 at once\n# here: up to 1 trial at once (2 "
                                       "allowed, and the 1 core(s) this process may use hold 1 "
                                       "trial(s) of 1 slot(s))\n"));
  // The searcher keys only adaptive ASHA reads are not in a grid's resolved config.
  CHECK_THAT(g.output, !Catch::Contains("divisor") && !Catch::Contains("max_rungs"));
  // 10^4 points on each of three axes: refused, not listed until memory runs out.
  std::string axes;
  for (const char* name : {"a", "b", "c"}) {
    axes += fmt::format(
        " --set 'hyperparameters.{}={{type: double, minval: 0, maxval: 1, count: "
        "10000}}'",
        name);
  }
  const auto huge = run_command(kTrainer + " check " + grid + axes);
  INFO(huge.output);
  CHECK(huge.exit_code == 2);
  CHECK_THAT(huge.output, Catch::Contains("hyperparameters: the grid's points (a: 10000 × b: "
                                          "10000 × c: 10000 × hidden: 2 × lr: 3) are more than "
                                          "the 1000000 a search runs; lower a count"));
  // Last: it writes the file the grid was in.
  const auto asha =
      run_command(kTrainer + " check " +
                  search_config(tmp,
                                "{name: adaptive_asha, metric: validation_loss, max_trials: 16, "
                                "bracket_rungs: [2, 1]}",
                                "lr: {type: double, minval: 0.01, maxval: 0.1}"));
  INFO(asha.output);
  CHECK(asha.exit_code == 0);
  CHECK_THAT(asha.output,
             Catch::Contains("# search adaptive_asha: 16 trials in 2 brackets: 11 trials with "
                             "rungs at 4, 16 batches, up to 8 at once; 5 trials with rungs at 16 "
                             "batches, up to 8 at once\n"));
}

TEST_CASE(
    "searcher.metric takes evaluate_batch's name or the prefixed one, and an unknown one fails "
    "at the first validation with its checkpoint kept",
    "[search][experiment]") {
  TempDir tmp;
  const std::string hp = "lr: {type: categorical, vals: [0.02, 0.05]}";
  SECTION("evaluate_batch's name") {
    search_ok(tmp, "{name: grid, metric: loss}", hp);
    const auto rows = rows_of(tmp / "exp");
    for (const auto& row : rows_with(rows, "validated")) {
      const auto metrics =
          read_metrics(tmp / ("exp/trials/" + row["trial"].dump()) + "/metrics.jsonl");
      CHECK(row["metric"] == metrics.back()["metrics"]["validation_loss"]);
    }
    CHECK(util::exists(tmp / "exp/" + trimmed(read_file(tmp / "exp/best"))));
  }
  SECTION("an unknown name") {
    const auto r =
        fit(search_config(tmp, "{name: grid, metric: lost, max_concurrent_trials: 1}", hp),
            tmp / "exp");
    INFO(r.output);
    CHECK(r.exit_code == 2);
    // Named at its place in the experiment's file, where it is mended, not in the trial's.
    CHECK_THAT(r.output, Catch::Contains(tmp / "search.yaml:4:32: searcher.metric: 'lost' is "
                                               "not among the validation metrics "
                                               "(validation_loss) (did you mean 'loss'?)"));
    CHECK_THAT(r.output, Catch::Contains("the training so far is in checkpoint"));
    CHECK_THAT(r.output, Catch::Contains("(the trial's config is " + tmp / "exp/trials/"));
    // The experiment records what ended it, and its report says what continues it.
    const auto rows = rows_of(tmp / "exp");
    REQUIRE_FALSE(rows.empty());
    CHECK(rows.back()["event"] == "search_failed");
    CHECK(rows.back()["exit_code"] == 2);
    CHECK_THAT(rows.back()["error"].get<std::string>(),
               Catch::Contains("searcher.metric: 'lost' is not among"));
    CHECK_THAT(read_file(tmp / "exp/experiment.log"),
               Catch::Contains("ERROR the search ended with an error (exit code 2): "));
    const auto report = run_command(kTrainer + " report " + tmp / "exp");
    INFO(report.output);
    REQUIRE(report.exit_code == 0);
    CHECK_THAT(read_file(tmp / "exp/report.html"),
               Catch::Contains("ended by an error (exit code 2): ") &&
                   Catch::Contains("a config that must change otherwise needs a new experiment"));
    // The metric ranks the search's trials: no resume changes it.
    const auto mended = run_command(kTrainer + " fit --resume " + tmp / "exp" +
                                    " --set searcher.metric=loss --allow-safe-changes");
    CHECK(mended.exit_code == 2);
    CHECK_THAT(mended.output, Catch::Contains("\n  searcher.metric: lost -> loss  (unsafe)"));
    // A resume killed after its replay leaves its row last: the error is no longer how it stands.
    write_file(tmp / "exp/experiment.jsonl",
               read_file(tmp / "exp/experiment.jsonl") + "{\"event\":\"resumed\"}\n");
    const auto after = run_command(kTrainer + " report " + tmp / "exp");
    INFO(after.output);
    CHECK_THAT(after.output, Catch::EndsWith("(stopped or killed; `trainer fit --resume " +
                                             tmp / "exp" + "` continues it)\n"));
    const auto v = run_command(kTrainer + " validate --checkpoint " +
                               tmp / "exp/trials/1/checkpoints/batch-0000000016");
    INFO(v.output);
    CHECK(v.exit_code == 0);
  }
}

TEST_CASE(
    "a trial stopped by a signal on its last batch is resumed and its final checkpoint holds "
    "the validation",
    "[search][experiment]") {
  TempDir tmp;
  // The trial signals itself on its last batch (15): its stop checkpoint at 16 is written before
  // the final validation; the runner restarts it, and the resumed run validates and writes the
  // checkpoint at 16 again, with the validation. A stop is no failure: it uses up no restart
  // (there are none to use here).
  const std::string output =
      search_ok(tmp, "{name: random, metric: validation_loss, max_trials: 1}",
                "lr: {type: double, minval: 0.01, maxval: 0.1}, sigterm_at: 15, sigterm_once: '" +
                    (tmp / "signalled") + "'",
                "max_restarts: 0\n");
  const auto rows = rows_of(tmp / "exp");
  REQUIRE(rows_with(rows, "restarted").size() == 1);
  CHECK(rows_with(rows, "restarted")[0]["stopped"] == true);
  CHECK(rows_with(rows, "failed").empty());
  CHECK_THAT(output, Catch::Contains("restarted after a stop from outside the search"));
  CHECK(rows_with(rows, "completed").size() == 1);
  CHECK(trimmed(read_file(tmp / "exp/best")) == "trials/1/checkpoints/batch-0000000016");
  const auto meta =
      json::parse(read_file(tmp / "exp/trials/1/checkpoints/batch-0000000016/metadata.json"));
  CHECK(meta["validation"]["validation_loss"] == rows_with(rows, "validated")[0]["metric"]);
}

TEST_CASE("options that only a single run has are refused for a search, by name",
          "[search][experiment]") {
  TempDir tmp;
  const std::string config =
      search_config(tmp, "{name: random, metric: validation_loss, max_trials: 1}",
                    "lr: {type: double, minval: 0.01, maxval: 0.1}");
  const auto test_mode = run_command(kTrainer + " fit " + config + " --test-mode");
  CHECK(test_mode.exit_code == 2);
  CHECK_THAT(test_mode.output, Catch::Contains("--test-mode checks one trial"));
  // Following that advice halfway is refused by check as by fit: lr is still a space.
  for (const std::string command : {"check", "fit"}) {
    const auto single =
        run_command(kTrainer + " " + command + " " + config + " --set searcher.name=single");
    CHECK(single.exit_code == 2);
    CHECK_THAT(single.output, Catch::Contains("hyperparameters.lr: is a search space"));
  }
  const auto launched = run_command("RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 " +
                                    kTrainer + " fit " + config);
  CHECK(launched.exit_code == 2);
  CHECK_THAT(launched.output, Catch::Contains("a search starts its trials' processes itself"));
  for (const std::string flag : {"--nnodes 2", "--master-addr 10.0.0.1", "--master-port 29500"}) {
    const auto nodes = run_command(kTrainer + " fit " + config + " " + flag);
    INFO(flag);
    CHECK(nodes.exit_code == 2);
    CHECK_THAT(nodes.output, Catch::Contains("a search runs on one machine; --nnodes, "
                                             "--node-rank, --master-addr and --master-port are "
                                             "for a run"));
  }
  const auto warm = run_command(kTrainer + " fit " + config + " --warm-start " + (tmp / "none"));
  CHECK(warm.exit_code == 2);
  CHECK_THAT(warm.output, Catch::Contains("--warm-start starts a run, not a search"));
  // Inside a Slurm allocation, its task and CPU counts must be numbers.
  for (const std::string bad : {"SLURM_NTASKS=two", "SLURM_NTASKS=2 SLURM_CPUS_PER_TASK=0"}) {
    const auto slurm = run_command("env -u SLURM_STEP_ID SLURM_JOB_ID=7 " + bad + " " + kTrainer +
                                   " fit " + config + " --output " + (tmp / "slurm"));
    CHECK(slurm.exit_code == 2);
    const std::string variable = bad.substr(bad.rfind(' ') + 1);
    CHECK_THAT(slurm.output,
               Catch::Contains(fmt::format("error: Slurm: environment variable {}='{}' is not a "
                                           "positive integer",
                                           variable.substr(0, variable.find('=')),
                                           variable.substr(variable.find('=') + 1))));
    CHECK_FALSE(util::exists(tmp / "slurm"));
  }
  search_ok(tmp, "{name: random, metric: validation_loss, max_trials: 1}",
            "lr: {type: double, minval: 0.01, maxval: 0.1}");
  // The same count as its trials' or another: refused as a search's, not as a run's.
  for (const char* slots : {"1", "2"}) {
    const auto resumed =
        run_command(kTrainer + " fit --resume " + (tmp / "exp") + " --slots " + slots);
    CHECK(resumed.exit_code == 2);
    CHECK_THAT(resumed.output,
               Catch::Contains("a search's trials train on its resources.slots_per_trial; --slots "
                               "is for a run"));
  }
  const auto other = run_command(kTrainer + " fit " + config +
                                 " --set hyperparameters.records=128 --output " + (tmp / "exp"));
  CHECK(other.exit_code == 2);
  CHECK_THAT(other.output, Catch::Contains("it holds an experiment of another config") &&
                               Catch::Contains("hyperparameters.records: 256 -> 128"));
}
