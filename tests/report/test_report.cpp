// `trainer report` through the real binary, on runs and searches that the real `trainer fit`
// wrote: what each page shows is read back (read_report.py parses it as XML) and compared with
// the run's own files.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint/checkpoint.h"
#include "fault_injection.h"
#include "resumable_run.h"
#include "util/file_lock.h"

using namespace crucible::testing;
using nlohmann::json;

namespace {

// Reads back the page at `path`; fails the test when it is not well-formed or links to a file
// that does not exist.
json read_page(const std::string& path) {
  const auto r = run_command(kPython + " " + std::string(CRUCIBLE_SOURCE_DIR) +
                             "/tests/report/read_report.py " + path + " 2>&1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  json page = json::parse(r.output);
  CHECK(page["missing_links"] == json::array());
  return page;
}

// Runs `trainer report` with `args`; requires exit 0.
std::string report_ok(const std::string& args) {
  const auto r = run_command(kTrainer + " report " + args + " 2>&1");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  return r.output;
}

// The table whose header starts with `first`.
json table_starting(const json& page, const std::string& first) {
  for (const auto& t : page["tables"]) {
    if (!t["header"].empty() && t["header"][0] == first) return t;
  }
  FAIL("no table starts with " << first);
  return {};
}

json chart_titled(const json& page, const std::string& title) {
  for (const auto& c : page["charts"]) {
    if (c["title"] == title) return c;
  }
  FAIL("no chart titled " << title);
  return {};
}

std::string six(double v) { return fmt::format("{:.6g}", v); }

std::vector<json> rows_of_type(const std::vector<json>& rows, const std::string& type) {
  std::vector<json> out;
  for (const auto& row : rows) {
    if (row["type"] == type) out.push_back(row);
  }
  return out;
}

// An experiment file in `dir` for SearchTrial: 256 records in batches of 16, a `tag`
// hyperparameter that needs escaping.
std::string search_config(const TempDir& dir, const std::string& searcher) {
  const std::string path = dir / "search.yaml";
  write_file(path,
             "name: report-search\nentrypoint: crucible_test_trials:SearchTrial\n"
             "hyperparameters: {global_batch_size: 16, records: 256, "
             "lr: {type: log, minval: -3, maxval: 0}, "
             "tag: {type: categorical, vals: ['<b>&\"x\"', plain]}}\nsearcher: " +
                 searcher +
                 "\nmax_length: {batches: 16}\nscheduling_unit: 4\n"
                 "reproducibility: {experiment_seed: 5}\n");
  return path;
}

// An experiment file in `dir` for one run of SearchTrial: 256 records in batches of 16, training
// reports every 5 batches, with `extra` (YAML lines: max_length, hyperparameters, ...).
std::string search_trial_config(const TempDir& dir, const std::string& extra) {
  const std::string path = dir / "run.yaml";
  write_file(path,
             "name: report-run\nentrypoint: crucible_test_trials:SearchTrial\n"
             "searcher: {metric: validation_loss}\nscheduling_unit: 5\n"
             "reproducibility: {experiment_seed: 3}\n" +
                 extra);
  return path;
}

// Fits SearchTrial, 256 records in batches of 16 at lr 0.05 for `length` (a max_length YAML
// mapping), into `dir`/run with `args`; requires success and returns the fit's output.
std::string fit_search_trial(const TempDir& dir, const std::string& length,
                             const std::string& args = "") {
  const auto fit = run_command(
      kTrainer + " fit " +
      search_trial_config(dir,
                          "hyperparameters: {global_batch_size: 16, records: 256, lr: 0.05}\n"
                          "max_length: " +
                              length + "\n") +
      args + " --output " + (dir / "run"));
  INFO(fit.output);
  REQUIRE(fit.exit_code == 0);
  return fit.output;
}

// "how it ended" on the page `trainer report` writes of `run`.
std::string how_it_ended(const std::string& run) {
  report_ok(run);
  return read_page(run + "/report.html")["facts"]["how it ended"];
}

}  // namespace

TEST_CASE("trainer report shows a finished run as its files tell it", "[report]") {
  TempDir tmp;
  const std::string run = finished_resumable_run(
      tmp, 0, " --set profiling.enabled=true --set profiling.begin_on_batch=10");
  const std::string out = report_ok(run);
  CHECK(out.find(run + "/report.html") != std::string::npos);
  const json page = read_page(run + "/report.html");
  // The command prints the page's "how it ended" line last.
  CHECK_THAT(out, Catch::EndsWith("\n" + page["facts"]["how it ended"].get<std::string>() + "\n"));
  const auto rows = read_metrics(run + "/metrics.jsonl");
  const auto validations = rows_of_type(rows, "validation");
  REQUIRE(validations.size() == 4);

  CHECK(page["title"] == "resumable: run run");
  CHECK(page["facts"]["how it ended"] == "complete: trained 4 epochs");
  CHECK(page["facts"]["trained"] == "128 batches, 2048 records, 4 epochs");

  // The loss chart holds the training and the validation losses, at their batches.
  const json loss = chart_titled(page, "loss");
  const auto training = rows_of_type(rows, "training");
  REQUIRE(loss["series"]["training"].size() == training.size());
  REQUIRE(loss["series"]["validation"].size() == validations.size());
  size_t best = 0;
  for (size_t i = 0; i < validations.size(); ++i) {
    const double v = validations[i]["metrics"]["validation_loss"];
    if (v < validations[best]["metrics"]["validation_loss"].get<double>()) best = i;
    CHECK(loss["series"]["validation"][i]["x"] == validations[i]["batches"].get<double>());
    CHECK(six(loss["series"]["validation"][i]["y"]) == six(v));
  }
  CHECK(loss["series"]["validation"][best]["note"] == "the best validation");
  CHECK(six(loss["series"]["training"].back()["y"]) == six(training.back()["metrics"]["loss"]));
  CHECK(chart_titled(page, "seen")["series"]["training"].size() == training.size());

  // The validations, the best one marked.
  const json table = table_starting(page, "batches");
  CHECK(table["header"] == json::array({"batches", "epochs", "validation_loss"}));
  REQUIRE(table["rows"].size() == validations.size());
  CHECK(table["marked"] == json::array({best}));
  CHECK(table["rows"][best][2] == six(validations[best]["metrics"]["validation_loss"]));

  // Every checkpoint the run kept, each linked to its metadata; the best by the metric marked.
  const json checkpoints = table_starting(page, "checkpoint");
  const auto kept = crucible::checkpoint::list(run);
  REQUIRE(checkpoints["rows"].size() == kept.size());
  std::optional<size_t> best_checkpoint;
  for (size_t i = 0; i < kept.size(); ++i) {
    const auto m = crucible::checkpoint::metadata(kept[i]);
    CHECK(checkpoints["rows"][i][0] == crucible::util::file_name(kept[i]));
    CHECK(checkpoints["rows"][i][1] == std::to_string(m.batches));
    const auto v = m.validation.find("validation_loss");
    if (v != m.validation.end() &&
        (!best_checkpoint || v->second < crucible::checkpoint::metadata(kept[*best_checkpoint])
                                             .validation.at("validation_loss"))) {
      best_checkpoint = i;
    }
  }
  REQUIRE(best_checkpoint);
  CHECK(checkpoints["marked"] == json::array({*best_checkpoint}));

  // The profiler's phases: each phase's mean over the profiled batches (a report's row weighs
  // as many as it covers: the first, at batch 14, covers 10 to 13), a peak's largest, and each
  // report in the chart.
  const auto profiling = read_metrics(run + "/profiling/metrics.jsonl");
  REQUIRE(profiling.size() >= 2);
  REQUIRE(profiling[0]["batches"] == 14);
  double weighted = 0, weights = 0, peak = 0;
  int64_t report_before = 10;  // where the window begins
  for (const auto& row : profiling) {
    const int64_t batches = row["batches"].get<int64_t>();
    weighted += row["metrics"]["train_batch_ms"].get<double>() *
                static_cast<double>(batches - report_before);
    weights += static_cast<double>(batches - report_before);
    peak = std::max(peak, row["metrics"]["process_peak_memory_gb"].get<double>());
    report_before = batches;
  }
  const json means = table_starting(page, "metric");
  std::map<std::string, std::string> shown;
  for (const auto& row : means["rows"]) shown[row[0]] = row[1];
  CHECK(shown["train_batch_ms"] == six(weighted / weights));
  CHECK(shown["process_peak_memory_gb"] == six(peak));
  CHECK(chart_titled(page, "milliseconds per batch, by phase")["series"]["train_batch_ms"].size() ==
        profiling.size());

  // The config as the run recorded it.
  CHECK(std::find(page["pre"].begin(), page["pre"].end(), read_file(run + "/config.yaml")) !=
        page["pre"].end());
}

TEST_CASE("trainer report of a run stopped mid-way, with a torn last row, or damaged", "[report]") {
  TempDir tmp;
  const std::string run = finished_resumable_run(tmp);
  const auto rows = read_metrics(run + "/metrics.jsonl");
  // A run whose max_length was lowered on resume below what it had trained says so.
  const std::string config = read_file(run + "/config.yaml");
  const std::string length = "max_length: {epochs: 4}";
  REQUIRE(config.find(length) != std::string::npos);
  write_file(run + "/config.yaml", config.substr(0, config.find(length)) +
                                       "max_length: {epochs: 3}" +
                                       config.substr(config.find(length) + length.size()));
  report_ok(run + " --output " + (tmp / "page.html"));
  CHECK(read_page(tmp / "page.html")["facts"]["how it ended"] ==
        "complete: trained 4 epochs, past max_length 3 (lowered on resume)");
  write_file(run + "/config.yaml", config);
  // The rows up to 50 batches, then half of a row, as a kill leaves them.
  std::string kept;
  double epochs = 0;
  for (const auto& row : rows) {
    if (row["batches"].get<int64_t>() > 50) continue;
    kept += row.dump() + "\n";
    epochs = std::max(epochs, row["epochs"].get<double>());
  }
  write_file(run + "/metrics.jsonl", kept + R"({"type":"training","batc)");
  std::ofstream(run + "/trainer.log", std::ios::app)
      << "2026-11-25T10:00:00Z ERROR a failure <of> the trial\n";
  report_ok(run + " --output " + (tmp / "page.html"));
  const json page = read_page(tmp / "page.html");
  const std::string how = page["facts"]["how it ended"];
  CHECK_THAT(how, Catch::StartsWith("not finished: " + six(epochs) +
                                    " of 4 epochs reported, the newest checkpoint at batch " +
                                    std::to_string(rows.back()["batches"].get<int64_t>()) + " ("));
  CHECK_THAT(how, Catch::Contains("`trainer fit --resume " + run +
                                  "` continues it from its newest checkpoint"));
  CHECK_THAT(how, Catch::EndsWith("the log's last ERROR line: a failure <of> the trial"));
  // A process stopped by a signal says so in the log, and the page repeats it, until a process
  // starts again.
  std::ofstream(run + "/trainer.log", std::ios::app)
      << "2026-11-25T10:00:01Z INFO received Interrupt: checkpointing at batch 50 and stopping\n";
  report_ok(run + " --output " + (tmp / "page.html"));
  CHECK_THAT(std::string(read_page(tmp / "page.html")["facts"]["how it ended"]),
             Catch::Contains("(stopped: received Interrupt: checkpointing at batch 50 and "
                             "stopping; `trainer fit --resume"));
  std::ofstream(run + "/trainer.log", std::ios::app)
      << "2026-11-25T10:00:02Z INFO resuming run " << run << ": trial x on cpu\n";
  report_ok(run + " --output " + (tmp / "page.html"));
  CHECK_THAT(std::string(read_page(tmp / "page.html")["facts"]["how it ended"]),
             Catch::Contains("(failed, stopped or killed; "));
  CHECK(chart_titled(page, "loss")["series"]["validation"].size() == 1);  // the one at 32
  {
    // A process holds the run's lock: it trains now, and nothing suggests continuing it.
    const auto lock = crucible::util::FileLock::try_lock(run + "/.lock");
    REQUIRE(lock);
    report_ok(run + " --output " + (tmp / "page.html"));
    const std::string live = read_page(tmp / "page.html")["facts"]["how it ended"];
    CHECK(live == "training now: " + six(epochs) +
                      " of 4 epochs reported, the newest checkpoint at batch " +
                      std::to_string(rows.back()["batches"].get<int64_t>()) +
                      " (a process holds the run's lock)");
  }
  for (const std::string& checkpoint : crucible::checkpoint::list(run)) {
    crucible::util::remove_all(checkpoint);
  }
  report_ok(run + " --output " + (tmp / "page.html"));
  CHECK_THAT(std::string(read_page(tmp / "page.html")["facts"]["how it ended"]),
             Catch::Contains("reported, no checkpoint yet (failed, stopped or killed; `trainer fit "
                             "--resume " +
                             run + "` starts it again from the beginning)"));

  // A run that stopped itself says why (the row early stopping and set_stop_requested write).
  write_file(run + "/metrics.jsonl",
             kept + R"({"type":"stopped","batches":49,"records":784,"epochs":1.53125,)"
                    R"("metrics":{},"reason":"early stopping: validation_loss did not improve"})"
                    "\n");
  report_ok(run + " --output " + (tmp / "page.html"));
  CHECK(read_page(tmp / "page.html")["facts"]["how it ended"] ==
        "stopped early at 49 batches: early stopping: validation_loss did not improve");

  // A damaged row with rows after it is named with its line.
  write_file(run + "/metrics.jsonl", rows[0].dump() + "\n{not json\n" + rows[1].dump() + "\n");
  const auto damaged = run_command(kTrainer + " report " + run + " 2>&1");
  CHECK(damaged.exit_code == 1);
  CHECK_THAT(damaged.output, Catch::Contains(run + "/metrics.jsonl:2: not a JSON row"));
}

TEST_CASE("trainer report shows the last error of the run's last process only", "[report]") {
  TempDir tmp;
  const std::string run = tmp / "run";
  const std::string config = search_trial_config(
      tmp,
      "hyperparameters: {global_batch_size: 16, records: 256, lr: 0.05, sleep_ms: 20, "
      "fail_at: 30, fail_once: " +
          (tmp / "failed") +
          "}\nmax_length: {batches: 400}\nmin_checkpoint_period: {batches: 10}\n");
  const auto failed = run_command(kTrainer + " fit " + config + " --quiet --output " + run);
  INFO(failed.output);
  REQUIRE(failed.exit_code == 1);
  CHECK_THAT(how_it_ended(run),
             Catch::EndsWith("the log's last ERROR line: train_batch (batch 30) threw: injected "
                             "failure at batch 30"));
  // Resumed past the failure, then killed: its process logged no error.
  {
    Child child(kTrainer + " fit --resume " + run + " --quiet", tmp / "resume.log");
    REQUIRE(wait_until([&] { return last_batches(run + "/metrics.jsonl", "training") >= 45; }));
    child.signal(SIGKILL);
    CHECK(child.wait() == 128 + SIGKILL);
  }
  const std::string how = how_it_ended(run);
  CHECK_THAT(how, Catch::StartsWith("not finished: "));
  CHECK_THAT(how, Catch::EndsWith("(failed, stopped or killed; `trainer fit "
                                  "--resume " +
                                  run + "` continues it from its newest checkpoint)"));
}

TEST_CASE("trainer report of a run whose max_length in records ends inside a batch", "[report]") {
  TempDir tmp;
  // 1000 records are 62.5 batches of 16: training rounds them up to 63 batches, 1008 records.
  const std::string run = tmp / "run";
  fit_search_trial(tmp, "{records: 1000}", " --quiet");
  CHECK(how_it_ended(run) == "complete: trained 1008 records");
  const std::string config = read_file(run + "/config.yaml");
  const std::string length = "max_length: {records: 1000}";
  REQUIRE(config.find(length) != std::string::npos);
  const auto with_length = [&](int64_t records) {
    write_file(run + "/config.yaml", config.substr(0, config.find(length)) +
                                         "max_length: {records: " + std::to_string(records) + "}" +
                                         config.substr(config.find(length) + length.size()));
  };
  // 993 records train the same 63 batches; 992 are 62.
  with_length(993);
  CHECK(how_it_ended(run) == "complete: trained 1008 records");
  with_length(992);
  CHECK(how_it_ended(run) ==
        "complete: trained 1008 records, past max_length 992 (lowered on "
        "resume)");
}

TEST_CASE("trainer report of a --test-mode run recommends no resume", "[report]") {
  TempDir tmp;
  const std::string run = tmp / "run";
  const std::string output = fit_search_trial(tmp, "{batches: 100}", " --test-mode");
  // Its one training report gives no time left to a max_length it never trains to.
  CHECK_THAT(output, Catch::Contains("batches/s)"));
  CHECK_THAT(output, !Catch::Contains(" left"));
  const std::string how = how_it_ended(run);
  CHECK(how ==
        "a --test-mode run (one training batch and one validation batch), which is never "
        "continued: start a run with `trainer fit CONFIG`");
  const auto resumed = run_command(kTrainer + " fit --resume " + run);
  CHECK(resumed.exit_code == 2);
}

TEST_CASE("trainer report under a full disk or I/O errors: the cause named, no partial page",
          "[report][faults]") {
  TempDir tmp;
  const std::string run = finished_resumable_run(tmp, 0, " --set profiling.enabled=true");
  const auto report = [](const std::string& dir) { return kTrainer + " report " + dir + "/run"; };
  SECTION("a full disk") {
    fault_single_output(run, tmp / "full", full_disk(), 3, "run/report.html", report);
  }
  SECTION("an I/O error") {
    fault_single_output(run, tmp / "io", io_error(), 5, "run/report.html", report);
  }
  SECTION("a failed look-up") {
    fault_single_output(run, tmp / "stat", stat_error(), 3, "run/report.html", report);
  }
}

TEST_CASE("trainer report refuses what is not a run or an experiment, naming it", "[report]") {
  TempDir tmp;
  const auto help = run_command(kTrainer + " report --help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.output, Catch::StartsWith("usage: trainer report DIR [--output FILE]"));
  const auto none = run_command(kTrainer + " report 2>&1");
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.output,
             Catch::Contains("a report needs the directory of a run or an experiment"));
  const auto missing = run_command(kTrainer + " report " + (tmp / "nope") + " 2>&1");
  CHECK(missing.exit_code == 2);
  CHECK_THAT(missing.output, Catch::Contains(tmp / "nope" + ": no such directory"));
  // The experiment file given instead of the directory training wrote.
  write_file(tmp / "experiment.yaml", "name: x\n");
  const auto file = run_command(kTrainer + " report " + (tmp / "experiment.yaml") + " 2>&1");
  CHECK(file.exit_code == 2);
  CHECK_THAT(file.output, Catch::Contains(tmp / "experiment.yaml" +
                                          ": a file, not a directory; a report is made from the "
                                          "directory that training wrote (its --output)"));
  const auto neither = run_command(kTrainer + " report " + tmp.path() + " 2>&1");
  CHECK(neither.exit_code == 2);
  CHECK_THAT(neither.output,
             Catch::Contains(tmp.path() + " holds no run or experiment: no config.yaml in it"));
  crucible::util::remove_all(tmp / "experiment.yaml");
  write_file(tmp / "config.yaml", "name: x\nentrypoint: [\n");
  const auto bad_config = run_command(kTrainer + " report " + tmp.path() + " 2>&1");
  CHECK(bad_config.exit_code == 2);
  CHECK_THAT(bad_config.output, Catch::Contains(tmp / "config.yaml:"));
  const auto no_dir = run_command(kTrainer + " report " + tmp.path() + " --output " +
                                  (tmp / "nope/page.html") + " 2>&1");
  CHECK(no_dir.exit_code == 2);
  CHECK_THAT(no_dir.output, Catch::Contains("--output " + (tmp / "nope/page.html") +
                                            ": directory " + (tmp / "nope") + " does not exist"));
  // The page never replaces a directory or a file of the run.
  crucible::util::create_directories(tmp / "pages");
  crucible::util::create_directories(tmp / "checkpoints/batch-1");
  for (const std::string& output : {tmp / "pages", tmp / "pages/"}) {
    const auto dir = run_command(kTrainer + " report " + tmp.path() + " --output " + output);
    CHECK(dir.exit_code == 2);
    CHECK_THAT(dir.output, Catch::Contains("--output " + output + ": a directory; give the file"));
  }
  // Through a link and '..' too, as the write would go.
  REQUIRE(::symlink((tmp / "checkpoints/batch-1").c_str(), (tmp / "link").c_str()) == 0);
  for (const std::string& output :
       {tmp / "metrics.jsonl", tmp / "checkpoints/batch-1/x", tmp / "link/../../metrics.jsonl"}) {
    const auto own = run_command(kTrainer + " report " + tmp.path() + " --output " + output);
    CHECK(own.exit_code == 2);
    CHECK_THAT(own.output, Catch::Contains("--output " + output +
                                           ": a file of the run or "
                                           "experiment " +
                                           tmp.path() + "; write elsewhere"));
  }
}

TEST_CASE("trainer report of a search stopped before it created all its trials",
          "[report][search]") {
  TempDir tmp;
  const std::string exp = tmp / "exp";
  const std::string config = search_config(
      tmp, "{name: random, metric: validation_loss, max_trials: 3, max_concurrent_trials: 1}");
  const auto fit = run_command(kTrainer + " fit " + config + " --quiet --output " + exp);
  INFO(fit.output);
  REQUIRE(fit.exit_code == 0);
  // As a kill between trial 1's result and trial 2's creation leaves it.
  const auto rows = read_metrics(exp + "/experiment.jsonl");
  REQUIRE(rows.size() == 9);
  REQUIRE(rows[2]["event"] == "completed");
  REQUIRE(rows[3]["event"] == "created");
  std::string kept;
  for (size_t i = 0; i < 3; ++i) kept += rows[i].dump() + "\n";
  // A log that is not this search's: trial 1's result recorded as trial 2's.
  json foreign = rows[1];
  foreign["trial"] = 2;
  write_file(exp + "/experiment.jsonl", rows[0].dump() + "\n" + foreign.dump() + "\n");
  report_ok(exp);
  CHECK_THAT(read_page(exp + "/report.html")["facts"]["how it stands"].get<std::string>(),
             Catch::StartsWith("cannot tell: " + exp +
                               "/experiment.jsonl does not match this "
                               "search: it records a result of trial 2 where the searcher "
                               "expects trial 1"));
  // As a kill while the last trial's result was being recorded leaves it: validated, not yet
  // completed, though no trial is left to run.
  std::string all_but_last;
  for (size_t i = 0; i + 1 < rows.size(); ++i) all_but_last += rows[i].dump() + "\n";
  REQUIRE(rows[7]["event"] == "validated");
  write_file(exp + "/experiment.jsonl", all_but_last);
  const std::string printed = report_ok(exp);
  json page = read_page(exp + "/report.html");
  const std::string stands =
      "not finished: 2 of 3 trials ended, 1 running (stopped or killed; `trainer fit --resume " +
      exp + "` continues it)";
  CHECK(page["facts"]["how it stands"] == stands);
  CHECK_THAT(printed, Catch::EndsWith("\n" + stands + "\n"));
  // The running trial's row shows how far its own run got (its 16 batches), as its page does.
  const json trial_rows = table_starting(page, "trial")["rows"];
  const auto third = std::find_if(trial_rows.begin(), trial_rows.end(),
                                  [](const json& row) { return row[0] == "3"; });
  REQUIRE(third != trial_rows.end());
  CHECK((*third)[1] == "running");
  CHECK((*third)[3] == "16 so far");
  {
    const auto lock = crucible::util::FileLock::try_lock(exp + "/.lock");
    REQUIRE(lock);
    report_ok(exp);
    CHECK(read_page(exp + "/report.html")["facts"]["how it stands"] ==
          "not finished: 2 of 3 trials ended, 1 running (searching now: a process holds the "
          "experiment's lock)");
  }
  write_file(exp + "/experiment.jsonl", kept);
  for (const char* trial : {"2", "3"}) {
    REQUIRE(run_command("rm -r " + exp + "/trials/" + trial + " " + exp + "/trials/" + trial + ".*")
                .exit_code == 0);
  }
  report_ok(exp);
  CHECK(read_page(exp + "/report.html")["facts"]["how it stands"] ==
        "not finished: 1 of 3 trials ended (stopped or killed; `trainer fit --resume " + exp +
            "` continues it)");
  // What the page says continues it does, to the end.
  const auto resumed = run_command(kTrainer + " fit --resume " + exp + " --quiet");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  report_ok(exp);
  page = read_page(exp + "/report.html");
  CHECK(page["facts"]["trials"] == "3 completed");
  CHECK(page["facts"]["how it stands"] == "complete: every trial ended");
  // An error recorded after the last trial (its end's work undone) is said, with what ends it.
  const std::string complete = read_file(exp + "/experiment.jsonl");
  write_file(
      exp + "/experiment.jsonl",
      complete + R"({"event":"search_failed","error":"cannot write best","exit_code":1})" + "\n");
  report_ok(exp);
  CHECK(read_page(exp + "/report.html")["facts"]["how it stands"] ==
        "every trial ended, and the search ended by an error (exit code 1): cannot write best; "
        "`trainer fit --resume " +
            exp + "` ends it");
}

TEST_CASE("trainer report of an ASHA search ranks its trials and gives each its own page",
          "[report][search]") {
  TempDir tmp;
  const std::string exp = tmp / "exp";
  // 6 trials, max_time 16, divisor 2, aggressive: rungs at [2, 4, 8, 16] batches.
  const auto fit = run_command(
      kTrainer + " fit " +
      search_config(tmp,
                    "{name: adaptive_asha, metric: validation_loss, max_trials: 6, max_time: 16, "
                    "time_metric: batches, divisor: 2, mode: aggressive, "
                    "max_concurrent_trials: 2}") +
      " --output " + exp);
  INFO(fit.output);
  REQUIRE(fit.exit_code == 0);
  const std::string out = report_ok(exp);
  const json page = read_page(exp + "/report.html");
  const auto rows = read_metrics(exp + "/experiment.jsonl");

  // Each trial's best metric and final state, from the log.
  std::map<int64_t, double> best;
  std::map<int64_t, std::string> state;
  std::map<int64_t, json> stop;  // the validation at which the searcher stopped the trial
  size_t at_rungs = 0;
  for (const auto& row : rows) {
    const int64_t id = row["trial"];
    if (row["event"] == "validated") {
      const double m = row["metric"];
      if (!best.count(id) || m < best[id]) best[id] = m;
      at_rungs += row.contains("rung") ? 1 : 0;
      if (row["decision"] == "stop") stop[id] = row;
    }
    if (row["event"] == "stopped" || row["event"] == "completed") state[id] = row["event"];
  }
  REQUIRE(best.size() == 6);
  std::vector<int64_t> order;
  for (const auto& [id, _] : best) order.push_back(id);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return best[a] < best[b]; });

  const json trials = table_starting(page, "trial");
  REQUIRE(trials["rows"].size() == 6);
  CHECK(trials["marked"] == json::array({0}));
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t id = order[i];
    INFO("row " << i << ", trial " << id);
    CHECK(trials["rows"][i][0] == std::to_string(id));
    CHECK(trials["rows"][i][1] == state[id]);
    CHECK(trials["rows"][i][2] == six(best[id]));
    // The trial's own page exists, links back, and is a run page of its run.
    REQUIRE(trials["links"][i] == json::array({"trials/" + std::to_string(id) + "/report.html"}));
    CHECK(out.find(exp + "/trials/" + std::to_string(id) + "/report.html") != std::string::npos);
    const json trial_page = read_page(exp + "/trials/" + std::to_string(id) + "/report.html");
    CHECK(trial_page["links"][0] == "../../report.html");
    const auto trial_validations = rows_of_type(
        read_metrics(exp + "/trials/" + std::to_string(id) + "/metrics.jsonl"), "validation");
    REQUIRE_FALSE(trial_validations.empty());
    CHECK(six(chart_titled(trial_page, "loss")["series"]["validation"].back()["y"]) ==
          six(trial_validations.back()["metrics"]["validation_loss"]));
    // A trial the searcher stopped trained all of its segment, and its page says who ended it.
    if (state[id] == "stopped") {
      REQUIRE(stop.count(id));
      CHECK(trial_page["facts"]["how it ended"] ==
            fmt::format("stopped by the searcher at rung {}, after {} batches (validation_loss {} "
                        "there): ASHA continues only the best of each rung",
                        stop[id]["rung"].get<int64_t>(), stop[id]["length"].get<int64_t>(),
                        six(stop[id]["metric"])));
    } else {
      CHECK(trial_page["facts"]["how it ended"] == "complete: trained 16 batches");
    }
  }
  CHECK(std::count_if(state.begin(), state.end(),
                      [](const auto& s) { return s.second == "stopped"; }) > 0);
  // The hyperparameter that needs escaping reads back as it is.
  const auto header = trials["header"];
  const size_t tag = std::find(header.begin(), header.end(), "tag") - header.begin();
  REQUIRE(tag < header.size());
  bool escaped_tag = false;
  for (const auto& row : trials["rows"]) escaped_tag |= row[tag] == "<b>&\"x\"";
  CHECK(escaped_tag);

  // The best trial is drawn out, and the best checkpoint is the experiment's `best`.
  CHECK(page["facts"]["best trial"] ==
        fmt::format("trial {}: validation_loss {}", order[0], six(best[order[0]])));
  std::string best_file = read_file(exp + "/best");
  best_file.pop_back();
  CHECK(page["facts"]["best checkpoint"] == best_file);
  const json progress = chart_titled(page, "validation_loss of every trial");
  CHECK(progress["series"].size() == 6);
  const json lr = chart_titled(page, "best validation_loss by lr");
  CHECK(lr["series"]["lr"].size() == 6);  // every trial validated

  // The rungs account for every validation at a rung.
  const json rungs = table_starting(page, "bracket");
  size_t validated = 0;
  for (const auto& row : rungs["rows"]) validated += std::stoul(row[3].get<std::string>());
  CHECK(validated == at_rungs);
  CHECK(page["facts"]["how it stands"] == "complete: every trial ended");

  // Written elsewhere, the page's links lead to the same files from there.
  report_ok(exp + " --output " + (tmp / "elsewhere.html"));
  const json elsewhere = read_page(tmp / "elsewhere.html");
  CHECK(table_starting(elsewhere, "trial")["links"][0] ==
        json::array({"exp/trials/" + std::to_string(order[0]) + "/report.html"}));
}
